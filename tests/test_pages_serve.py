"""``GET /serve``: the "Serve it" page, reached from every training estimate with the model and server filled in."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import parse_qs, urlparse

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app


@pytest.fixture
def client(tmp_path) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'p.db'}"))
    with TestClient(app) as c:
        yield c


def test_serve_page_shows_memory_speed_cost_and_the_chart(client: TestClient) -> None:
    r = client.get("/serve?model=llama-3.1-8b&server=dell-xe9680-h200")
    assert r.status_code == 200, r.text
    assert 'id="starts-badge">starts<' in r.text
    assert "vllm serve meta-llama/Llama-3.1-8B" in r.text
    assert 'id="chart-serving"' in r.text and 'id="usd-out"' in r.text and 'id="kv-tokens"' in r.text


def test_a_set_up_that_will_not_start_shows_vllms_error(client: TestClient) -> None:
    r = client.get("/serve?model=llama-3.1-70b&max_model_len=131072&input_tokens=1000&output_tokens=100")
    assert r.status_code == 200
    assert "will not start" in r.text and "No available memory for the cache blocks" in r.text


def test_bad_input_is_a_422_page_naming_the_field(client: TestClient) -> None:
    r = client.get("/serve?tp=zero")
    assert r.status_code == 422
    assert "<strong>tp</strong>" in r.text
    assert "Traceback" not in r.text
    r = client.get("/serve?gpu=tpu-v5")
    assert r.status_code == 422 and "<strong>gpu</strong>" in r.text


def test_every_training_estimate_links_to_serve_it_with_model_and_server(client: TestClient) -> None:
    r = client.get("/estimate?model=llama-3.1-8b&hardware.server=dell-xe9680-h200&hardware.gpu=h200-sxm-141gb")
    assert r.status_code == 200, r.text[:500]
    m = re.search(r'href="(/serve\?[^"]+)" id="serve-link"', r.text)
    assert m, "no Serve it link"
    q = parse_qs(urlparse(m.group(1).replace("&amp;", "&")).query)
    assert q["model"] == ["llama-3.1-8b"] and q["server"] == ["dell-xe9680-h200"]
    follow = client.get(m.group(1).replace("&amp;", "&"))
    assert follow.status_code == 200 and "dell-xe9680-h200" in follow.text


def test_a_pasted_config_travels_as_model_json(client: TestClient) -> None:
    import json
    from urllib.parse import quote

    cfg = {"hf_config": {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192,
                         "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
                         "vocab_size": 128256}}
    r = client.get(f"/serve?model_json={quote(json.dumps(cfg))}")
    assert r.status_code == 200 and 'id="starts-badge">starts<' in r.text
    assert "vllm serve &lt;your-model-dir&gt;" in r.text
    bad = client.get("/serve?model_json=%7Bnot")
    assert bad.status_code == 422 and "<strong>model_json</strong>" in bad.text


SAME_ORIGIN = {"Origin": "http://testserver"}


def _serve_link(client: TestClient, estimate_query: str) -> str:
    r = client.get(f"/estimate?{estimate_query}")
    assert r.status_code == 200, r.text[:500]
    m = re.search(r'href="(/serve\?[^"]+)" id="serve-link"', r.text)
    assert m, "no Serve it link"
    return m.group(1).replace("&amp;", "&")


def test_save_as_quote_on_the_serve_page_keeps_training_and_serving(client: TestClient) -> None:
    import html

    job = "model=llama-3.1-8b&hardware.server=dell-xe9680-h200&hardware.gpu=h200-sxm-141gb"
    link = _serve_link(client, job)
    assert "train" in parse_qs(urlparse(link).query), "the Serve link carries the training estimate"
    page = client.get(link + "&input_tokens=2048&output_tokens=512")
    assert page.status_code == 200 and 'id="serve-save-form"' in page.text
    fields = dict(re.findall(r'<input type="hidden" name="(query|serve_query)" value="([^"]*)"', page.text))
    fields = {k: html.unescape(v) for k, v in fields.items()}
    assert "train=" not in fields["serve_query"] and "input_tokens=2048" in fields["serve_query"]
    saved = client.post("/quotes", data={**fields, "name": "8B train + serve", "customer": "Acme", "price": "10"},
                        headers=SAME_ORIGIN, follow_redirects=False)
    assert saved.status_code == 303, saved.text[:800]
    detail = client.get(saved.headers["location"])
    assert detail.status_code == 200
    assert 'id="serving-line"' in detail.text and 'id="serving-usd-out"' in detail.text
    served = client.get(f"/serve?{fields['serve_query']}").text
    usd = re.search(r'id="usd-out">\$([\d.]+)<', served)
    assert usd and f"${usd.group(1)}" in detail.text  # the same $ per million output tokens as the Serve page
    item = saved.headers["location"].split("?")[0].rsplit("/", 1)[1]
    rev = client.get(f"/api/v1/quotes/{item}").json()["revision"]
    assert rev["serving_inputs"]["workload"] == {**rev["serving_inputs"]["workload"], "input_tokens": 2048,
                                                 "output_tokens": 512}
    assert rev["inputs"]["model"] == "llama-3.1-8b"


def test_without_a_training_estimate_the_serve_page_offers_no_quote(client: TestClient) -> None:
    r = client.get("/serve?model=llama-3.1-8b&server=dell-xe9680-h200")
    assert r.status_code == 200 and 'id="serve-save-form"' not in r.text


def test_a_bad_serving_line_is_a_422_naming_it(client: TestClient) -> None:
    job = "model=llama-3.1-8b&hardware.server=dell-xe9680-h200&hardware.gpu=h200-sxm-141gb"
    r = client.post("/quotes", data={"query": job, "serve_query": "model=llama-3.1-8b&tp=zero", "name": "x",
                                     "customer": "Acme", "price": "1"}, headers=SAME_ORIGIN, follow_redirects=False)
    assert r.status_code == 422
    assert 'id="err-serving"' in r.text and "tp:" in r.text
