"""HTML pages through TestClient, on the shipped hardware catalog and a temporary SQLite file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from fastapi.testclient import TestClient
from starlette.datastructures import QueryParams

from app.charts.style import GIB
from app.core.settings import Settings
from app.main import create_app
from app.web import backend
from app.web.forms import API_ONLY_FIELDS, SECTIONS, parse_form, request_to_query
from estimator import EstimateRequest, EstimateResponse, Hardware, Parallelism, Training, estimate
from estimator.request import HfConfigModel, ModelArch
from estimator.response import TimeResult, TrainResult
from tests.conftest import fresh_postgres_database
from tests.test_static import external_assets

SERVER = "dell-xe9680-h100"
#: what a browser sends with a form posted from one of the app's own pages (TestClient's host is testserver)
SAME_ORIGIN = {"Origin": "http://testserver"}
JOB = f"model=llama-3.1-70b&training.method=lora&hardware.server={SERVER}&parallelism.sharding=zero3" \
      "&training.activation_checkpointing=full"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("pages") / "pages.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_writes="100000/minute", rate_limit_web_pages="100000/minute")
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="module")
def catalog(client: TestClient) -> object:
    return client.app.state.catalog_cache.source  # type: ignore[attr-defined]


def _error(html: str, dom_id: str) -> str:
    match = re.search(rf'<span class="field-error" id="err-{re.escape(dom_id)}"[^>]*>([^<]*)</span>', html)
    assert match, f"no error slot for {dom_id}"
    return match.group(1)


def _article(html: str) -> str:
    """The result without its share/save card (only the live result page can save)."""
    match = re.search(r'<article class="result".*?</article>', html, re.S)
    assert match, "no result on the page"
    without_form = re.sub(r'<section class="card actions-card".*?</section>', "", match.group(0), flags=re.S)
    return re.sub(r"\s+", " ", without_form)


def _figure(html: str, name: str) -> dict:
    match = re.search(rf'<script type="application/json" id="fig-{name}">(.*?)</script>', html, re.S)
    assert match, f"no figure {name}"
    return json.loads(match.group(1))


PAGES = [
    "/", f"/estimate?{JOB}", "/compare", f"/compare?{JOB}", "/catalog", "/catalog/gpus", "/catalog/servers",
    "/catalog/cloud-offers", "/catalog/gpus/h100-sxm5-80gb", f"/catalog/servers/{SERVER}", "/quotes", "/plans",
    "/tco", f"/tco?server={SERVER}&nodes=2", f"/tco?{JOB}&training.train_tokens=1e9",
]


@pytest.mark.parametrize("path", PAGES)
def test_page_renders_and_loads_nothing_from_other_hosts(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200, response.text[-2000:]
    assert response.headers["content-type"].startswith("text/html")
    assert "<html" in response.text
    assert external_assets(response.text) == []


def test_assets_the_pages_reference_are_served(client: TestClient) -> None:
    html = client.get(f"/estimate?{JOB}").text
    paths = re.findall(r'(?:src|href)="(/static/[^"]+)"', html)
    assert any("plotly-" in p for p in paths) and any("htmx-" in p for p in paths)
    for path in paths:
        assert client.get(path).status_code == 200, path


def test_home_preselects_the_70b_and_has_a_control_for_every_contract_field(client: TestClient) -> None:
    html = client.get("/").text
    assert re.search(r'<option value="llama-3.1-70b" selected>', html)
    assert 'name="model_json"' in html
    for section, model in SECTIONS.items():
        for name in model.model_fields:
            if f"{section}.{name}" in API_ONLY_FIELDS:
                continue
            assert f'name="{section}.{name}"' in html, f"{section}.{name} has no form control"
    assert re.search(r"<details class=\"advanced\"", html)


def test_result_shows_verdict_charts_and_plain_words(client: TestClient, catalog: object) -> None:
    response = client.get(f"/estimate?{JOB}")
    assert response.status_code == 200
    html = response.text
    params = QueryParams(JOB)
    expected = estimate(parse_form(params).request, catalog)  # type: ignore[arg-type]
    verdict = re.search(r'id="verdict">([^<]+)<', html).group(1)  # type: ignore[union-attr]
    assert verdict == ("Fits" if expected.memory.fits else "Does not fit") or verdict == "Fits, tight"
    fig = _figure(html, "memory")
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert sum(t["x"][0] for t in bars) == pytest.approx(expected.memory.total_bytes / GIB)
    capacity = next(t for t in fig["data"] if t["name"] == "GPU capacity")
    assert capacity["x"][0] == pytest.approx(expected.memory.capacity_bytes / GIB)
    for text in expected.assumptions + expected.warnings:
        assert text.replace("'", "&#39;").replace('"', "&#34;") in html or text in html


def test_htmx_gets_the_fragment_with_out_of_band_errors_and_a_canonical_url(client: TestClient) -> None:
    response = client.get(f"/estimate?{JOB}&training.seq_len=4096", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert "<html" not in response.text
    assert 'id="estimate-result"' in response.text
    assert 'id="err-f-training-seq-len" hx-swap-oob="true"' in response.text
    pushed = response.headers["HX-Push-Url"]
    assert "training.seq_len" not in pushed, "defaults are left out of the shareable URL"
    assert response.headers["Vary"] == "HX-Request, Accept-Language, Cookie"  # fragment, and the page language
    restore = client.get(f"/estimate?{JOB}", headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})
    assert "<html" in restore.text


def test_the_shareable_url_reproduces_the_page(client: TestClient) -> None:
    first = client.get(f"/estimate?{JOB}&training.micro_batch_size=2&hardware.num_nodes=1").text
    share = re.search(r'id="share-url"[^>]*value="([^"]+)"', first).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    assert share.startswith("/estimate?")
    assert "training.micro_batch_size=2" in share and "hardware.num_nodes" not in share
    again = client.get(share).text
    assert _article(again) == _article(first)


REQUESTS = [
    EstimateRequest(),
    EstimateRequest(model="mixtral-8x7b", training=Training(method="qlora", lora_rank=64, train_tokens=2e9),
                    parallelism=Parallelism(sharding="hsdp", hsdp_shard_size=8, sequence_parallel=True),
                    hardware=Hardware(num_nodes=4, server=SERVER)),
    EstimateRequest(model=HfConfigModel(hf_config={"model_type": "llama", "hidden_size": 2048})),
    EstimateRequest(model=ModelArch(num_layers=4, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                                    vocab_size=32000, name="tiny")),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=["defaults", "everything", "hf-config", "arch"])
def test_query_string_round_trips_the_request(request_: EstimateRequest) -> None:
    query = request_to_query(request_)
    assert parse_form(QueryParams(query)).request == request_


BAD_INPUT = [
    ("training.seq_len=lots", "f-training-seq-len", "Enter a whole number"),
    ("parallelism.tp=0", "f-parallelism-tp", "Must be at least 1"),
    ("training.method=rlhf", "f-training-method", "Choose one of"),
    ("training.train_tokens=-5", "f-training-train-tokens", "Must be more than 0"),
    ("model=llama-9", "f-model", "unknown model preset"),
    ("model_json=%7Bnot+json", "f-model-json", "Not valid JSON"),
    ("model_json=%5B1%2C2%5D", "f-model-json", "Paste a JSON object"),
    ("model_json=%7B%22num_layers%22%3A0%7D", "f-model-json", "num_layers"),
    ("hardware.gpu=warp-drive-9000", "f-hardware-gpu", "unknown GPU"),
    ("hardware.server=nope", "f-hardware-server", "unknown server"),
    (f"hardware.server={SERVER}&hardware.gpu=a100-sxm4-80gb", "f-hardware-gpu", "carries"),
    ("hardware.gpu=a100-sxm4-80gb&training.precision=fp8-mixed", "f-training-precision", "fp8"),
]


@pytest.mark.parametrize(("query", "dom_id", "message"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_shows_the_form_again_with_the_message_next_to_the_field(
    client: TestClient, query: str, dom_id: str, message: str
) -> None:
    page = client.get(f"/estimate?{query}")
    assert page.status_code == 422
    assert message.lower() in _error(page.text, dom_id).lower()
    assert 'id="form-errors"' in page.text and "<form" in page.text
    fragment = client.get(f"/estimate?{query}", headers={"HX-Request": "true"})
    assert fragment.status_code == 200, "htmx only swaps 2xx responses"
    assert message.lower() in _error(fragment.text, dom_id).lower()


def test_save_reopen_list_and_recompute_a_quote(client: TestClient) -> None:
    live = client.get(f"/estimate?{JOB}").text
    form = {"query": JOB, "name": "70B LoRA for ACME", "customer": "ACME", "price": "125000"}
    saved = client.post("/quotes", data=form, headers=SAME_ORIGIN, follow_redirects=False)
    assert saved.status_code == 303
    url = saved.headers["location"]
    opened = client.get(url)
    assert opened.status_code == 200
    assert _article(opened.text) == _article(live)
    assert "$125,000" in opened.text
    listing = client.get("/quotes", params={"customer": "acme"}).text
    quote_path = urlsplit(url).path
    assert f'href="{quote_path}"' in listing and "70B LoRA for ACME" in listing
    assert client.get("/quotes", params={"q": "no such quote"}).text.count(f'href="{quote_path}"') == 0

    recomputed = client.post(f"{quote_path}/recompute", headers=SAME_ORIGIN, follow_redirects=False)
    assert recomputed.status_code == 303
    after = client.get(recomputed.headers["location"]).text
    assert "nothing changed" in after
    assert "revision 2 of 2" in after
    first = client.get(quote_path, params={"revision": 1}).text
    assert _article(first) == _article(live)
    assert client.get(quote_path, params={"revision": 9}).status_code == 404


def test_the_quote_links_reproduce_its_inputs_and_exports(client: TestClient) -> None:
    saved = client.post("/quotes", data={"query": JOB, "name": "links", "customer": "ACME", "price": "1"},
                        headers=SAME_ORIGIN, follow_redirects=False)
    html = client.get(saved.headers["location"]).text
    form_link = re.search(r'href="(/estimate\?[^"]+)" id="open-in-form"', html).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    assert dict(parse_qsl(urlsplit(form_link).query)) == dict(parse_qsl(JOB))
    for link_id in ("print-link", "export-json", "export-csv"):
        href = re.search(rf'href="([^"]+)" id="{link_id}"', html).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
        assert client.get(href).status_code == 200, href


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [({"customer": ""}, "customer", "Required"), ({"price": "lots"}, "price", "Enter an amount"),
     ({"price": "-3"}, "price", "Cannot be negative"), ({"name": ""}, "name", "Required")],
)
def test_save_errors_are_shown_next_to_the_save_fields(
    client: TestClient, form: dict[str, str], field: str, message: str
) -> None:
    data = {"query": JOB, "name": "n", "customer": "c", "price": "1", **form}
    response = client.post("/quotes", data=data, headers=SAME_ORIGIN)
    assert response.status_code == 422
    assert message in _error(response.text, f"quote-{field}")
    assert 'id="estimate-result"' in response.text


def test_unknown_quote_is_a_404_page(client: TestClient) -> None:
    response = client.get("/quotes/987654", headers={"Accept": "text/html"})
    assert response.status_code == 404
    assert "text/html" in response.headers["content-type"]


def test_compare_defaults_to_a100_h100_h200(client: TestClient) -> None:
    html = client.get(f"/compare?{JOB}").text
    options = re.findall(r'<tr data-option="([^"]+)" data-layout="yours"', html)
    assert [o.split("-")[0] for o in options] == ["a100", "h100", "h200"]
    fig = _figure(html, "cmp-memory")
    capacity = next(t for t in fig["data"] if t["name"] == "GPU capacity")
    assert len(capacity["x"]) == 6, "each option with the user's layout, then each with the planner's"
    assert capacity["x"][2] > capacity["x"][1], "the H200 holds more than the H100"


def test_compare_shows_per_option_errors_and_serves_htmx_fragments(client: TestClient) -> None:
    query = "training.precision=fp8-mixed&gpus=a100-sxm4-80gb&gpus=h100-sxm5-80gb"
    response = client.get(f"/compare?{query}", headers={"HX-Request": "true"})
    assert response.status_code == 200 and "<html" not in response.text
    assert "Cannot estimate" in response.text and "fp8" in response.text
    assert response.headers["HX-Push-Url"].startswith("/compare?")
    bad = client.get("/compare?training.seq_len=x")
    assert bad.status_code == 422 and "Enter a whole number" in bad.text


def test_catalog_lists_every_gpu_and_server_with_sources(client: TestClient, catalog: object) -> None:
    gpus = client.get("/catalog/gpus").text
    for gpu in catalog.gpus.values():  # type: ignore[attr-defined]
        assert f'id="gpu-{gpu.id}"' in gpus
    servers = client.get("/catalog/servers").text
    for server in catalog.servers.values():  # type: ignore[attr-defined]
        assert f'id="server-{server.id}"' in servers
    assert re.search(r'<a href="https?://[^"]+" rel="noreferrer"', gpus), "sources are links"
    entry = client.get(f"/catalog/servers/{SERVER}")
    assert entry.status_code == 200 and "gpu_count" in entry.text
    assert client.get("/catalog/gpus/no-such-gpu").status_code == 404
    assert client.get("/catalog/nothing").status_code == 422 or client.get("/catalog/nothing").status_code == 404


def test_templates_dir_is_inside_the_package() -> None:
    from app.web.templating import TEMPLATE_DIR

    assert Path(__file__).resolve().parents[1] / "app" / "templates" == TEMPLATE_DIR


def _with_timing(result: EstimateResponse) -> EstimateResponse:
    time = TimeResult(step_time_s=4.0, compute_s=3.0, communication_s=1.0, exposed_communication_s=0.5,
                      bubble_s=0.0, optimizer_s=0.4, offload_s=0.1, tokens_per_s=8192.0,
                      tokens_per_s_per_gpu=1024.0, tflops_per_gpu=420.0, mfu=0.42, error_bar_pct=15.0)
    train = TrainResult(time_to_train_s=36_000.0, gpu_hours=80.0, energy_kwh=60.0, checkpoint_bytes=10**9,
                        checkpoint_write_s=2.0, steps=1000, dataset_read_bytes_per_s=1e6)
    return result.model_copy(update={"time": time, "train": train})


def test_timing_cost_and_step_time_chart_when_the_estimator_gives_them(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimator's time model is optional in the contract; the page shows it whenever it is there."""
    real = backend.run_estimate
    monkeypatch.setattr(backend, "run_estimate", lambda req, cat: _with_timing(real(req, cat)))
    html = client.get(f"/estimate?{JOB}").text
    assert re.search(r'id="kpi-tps">8.19 ktok/s<', html)
    assert re.search(r'id="kpi-ttt">10 h<', html)
    assert "MFU" in html and "42%" in html
    cost = re.search(r'id="kpi-cost"[^>]*>\$([\d,.]+)', html)
    assert cost, "the H100 has on-demand cloud offers in the catalog"
    step = _figure(html, "step-time")
    assert sum(step["data"][0]["x"]) == pytest.approx(3.0 + 0.5 + 0.0 + 0.4 + 0.1)
    compare = client.get(f"/compare?{JOB}").text
    for name in ("cmp-speed", "cmp-time", "cmp-cost"):  # each option with the user's and the planner's layout
        assert len(_figure(compare, name)["data"][0]["y"]) == 6


def _kpi(html: str, name: str) -> str:
    return re.search(rf'id="kpi-{name}">([^<]+)<', html).group(1)  # type: ignore[union-attr]


def test_tco_assumptions_are_editable_and_sourced(client: TestClient) -> None:
    base = client.get(f"/tco?server={SERVER}").text
    dearer = client.get(f"/tco?server={SERVER}&a.electricity_usd_per_kwh=0.30").text
    assert _kpi(base, "capex") == _kpi(dearer, "capex")
    assert _kpi(base, "opex") != _kpi(dearer, "opex")
    assert "edited" in dearer and "edited" not in base
    assert re.search(r'id="f-a-electricity-usd-per-kwh"[^>]*placeholder="[\d.]+"', base), "the default is shown"
    assert re.search(r'id="src-f-a-pue"><a href="https?://', base), "the default's source is linked"
    for name in ("tco", "cumulative"):
        assert _figure(base, name)["data"]
    share = re.search(r'id="tco-share" class="share" readonly value="([^"]+)"', dearer).group(1)  # type: ignore[union-attr]
    assert "a.electricity_usd_per_kwh=0.30" in share.replace("&amp;", "&")


@pytest.mark.parametrize(
    ("query", "dom_id", "message"),
    [("a.pue=0.5", "f-a-pue", "at least 1"), ("a.utilisation=most", "f-a-utilisation", "Enter a number"),
     ("nodes=0", "f-nodes", "at least 1"), ("server=nope", "f-server", "unknown server"),
     ("server_price_usd=cheap", "f-server-price", "Enter a number"), ("offer=nope", "f-offer", "nope")],
)
def test_tco_bad_input_is_shown_next_to_the_field(client: TestClient, query: str, dom_id: str, message: str) -> None:
    page = client.get(f"/tco?{query}")
    assert page.status_code == 422
    assert message.lower() in _error(page.text, dom_id).lower()
    fragment = client.get(f"/tco?{query}", headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert message.lower() in _error(fragment.text, dom_id).lower()


@pytest.mark.parametrize(("method", "path", "field"), [
    ("GET", "/quotes/99999999999999999999", "path.item_id"),
    ("GET", "/plans/9223372036854775808", "path.item_id"),
    ("GET", "/quotes/0", "path.item_id"),
    ("GET", "/quotes/1?revision=99999999999999999999", "query.revision"),
    ("GET", "/quotes?page=99999999999999999999", "query.page"),
    ("GET", "/plans?page=0", "query.page"),
    ("GET", "/quotes?page=40002", "query.page"),
    ("POST", "/quotes/99999999999999999999/recompute", "path.item_id"),
    ("POST", "/plans/9223372036854775808/recompute", "path.item_id"),
    ("GET", "/quotes?q=a%00b", "query.q"),
    ("GET", "/quotes?customer=%00", "query.customer"),
    ("GET", "/catalog/gpus/a%00b", "path.entry_id"),
])
def test_out_of_range_ids_and_nul_characters_are_a_422_page(
    client: TestClient, method: str, path: str, field: str
) -> None:
    r = client.request(method, path, headers={**SAME_ORIGIN, "Accept": "text/html"})
    assert r.status_code == 422, r.text[-1000:]
    assert r.headers["content-type"].startswith("text/html")
    assert f"<code>{field}</code>" in r.text
    assert "Traceback" not in r.text


def test_the_last_reachable_page_is_an_empty_list_not_an_error(client: TestClient) -> None:
    r = client.get("/quotes?page=40001")
    assert r.status_code == 200 and "Page 40001" not in r.text


def test_nul_in_a_saved_form_is_a_422_page_and_nothing_is_stored(client: TestClient) -> None:
    before = client.get("/quotes").text.count("<tr>")
    r = client.post("/quotes", data={"query": JOB, "name": "a\x00b", "customer": "c", "price": "1"},
                    headers=SAME_ORIGIN)
    assert r.status_code == 422 and "<code>name</code>" in r.text
    assert client.get("/quotes").text.count("<tr>") == before


def test_the_customer_filter_of_the_page_ignores_case_in_every_script(client: TestClient) -> None:
    saved = client.post("/quotes", data={"query": JOB, "name": "unicode", "customer": "Ácme ☃", "price": "1"},
                        headers=SAME_ORIGIN, follow_redirects=False)
    path = urlsplit(saved.headers["location"]).path
    for typed in ("Ácme ☃", "ÁCME ☃", " ácme ☃ "):
        assert f'href="{path}"' in client.get("/quotes", params={"customer": typed}).text, typed
    assert f'href="{path}"' not in client.get("/quotes", params={"customer": "Acme"}).text


def _count(client: TestClient, kind: str) -> int:
    return len(re.findall(rf'<a href="/{kind}s/\d+">', client.get(f"/{kind}s").text))


@pytest.mark.parametrize("headers", [
    {},
    {"Origin": "https://evil.example"},
    {"Origin": "null"},
    {"Origin": "http://testserver.evil.example"},
    {"Origin": "http://testserver:8080"},
    {"Referer": "https://evil.example/estimate?x"},
    {"Origin": "https://evil.example", "Referer": "http://testserver/estimate"},
])
def test_a_form_post_from_another_site_is_a_403_page(client: TestClient, headers: dict[str, str]) -> None:
    saved = _count(client, "quote")
    form = {"query": JOB, "name": "csrf", "customer": "victim", "price": "1"}
    for path in ("/quotes", "/plans"):
        r = client.post(path, data=form, headers={"Accept": "text/html", **headers}, follow_redirects=False)
        assert r.status_code == 403, (path, r.status_code)
        assert r.headers["content-type"].startswith("text/html") and "Origin" in r.text
    assert client.post("/quotes/1/recompute", headers=headers, follow_redirects=False).status_code == 403
    assert _count(client, "quote") == saved


@pytest.mark.parametrize("headers", [
    SAME_ORIGIN, {"Origin": "http://testserver:80"}, {"Origin": "HTTP://TestServer"},
    {"Referer": "http://testserver/estimate?model=llama-3.1-70b"},
])
def test_a_form_post_from_the_apps_own_pages_is_accepted(client: TestClient, headers: dict[str, str]) -> None:
    r = client.post("/quotes", data={"query": JOB, "name": "same origin", "customer": "ACME", "price": "1"},
                    headers=headers, follow_redirects=False)
    assert r.status_code == 303, r.text[-500:]


def test_save_as_plan_from_the_result_page(client: TestClient) -> None:
    html = client.get(f"/estimate?{JOB}").text
    button = re.search(r'<button[^>]*id="save-plan-button"[^>]*>', html)
    assert button and 'formaction="/plans"' in button.group(0) and "formnovalidate" in button.group(0)
    assert ">Save as plan</button>" in html and ">Save as quote</button>" in html
    plans = _count(client, "plan")
    form = {"query": JOB, "name": "70B LoRA plan", "customer": "", "price": ""}
    saved = client.post("/plans", data=form, headers=SAME_ORIGIN, follow_redirects=False)
    assert saved.status_code == 303
    assert re.fullmatch(r"/plans/\d+\?saved=1", saved.headers["location"])
    opened = client.get(saved.headers["location"]).text
    assert '<h1 id="saved-name">70B LoRA plan</h1>' in opened
    assert _article(opened) == _article(client.get(f"/estimate?{JOB}").text)
    assert 'id="saved-price"' not in opened, "a plan has no price"
    assert _count(client, "plan") == plans + 1
    api = client.get(f"/api/v1/saved-plans/{saved.headers['location'].split('/')[2].split('?')[0]}").json()
    assert (api["name"], api["customer"], api["created_by"]) == ("70B LoRA plan", None, "web")


def test_save_as_plan_needs_a_name(client: TestClient) -> None:
    r = client.post("/plans", data={"query": JOB, "name": " "}, headers=SAME_ORIGIN)
    assert r.status_code == 422
    assert _error(r.text, "quote-name") == "Required"


@pytest.fixture
def limited_client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'limited.db'}", rate_limit_web_writes="2/minute",
                        rate_limit_web_pages="2/minute")
    with TestClient(create_app(settings)) as client:
        yield client


def test_web_posts_and_costly_pages_are_rate_limited_per_client(limited_client: TestClient) -> None:
    form = {"query": "model=llama-3.2-1b", "name": "n", "customer": "c", "price": "1"}
    posts = [limited_client.post("/quotes", data=form, headers=SAME_ORIGIN, follow_redirects=False)
             for _ in range(3)]
    assert [r.status_code for r in posts] == [303, 303, 429]
    assert int(posts[2].headers["Retry-After"]) >= 1 and posts[2].headers["content-type"].startswith("text/html")
    for page in ("/compare", "/plan"):
        statuses = [limited_client.get(page).status_code for _ in range(3)]
        assert statuses == [200, 200, 429], page
    assert {limited_client.get(p).status_code for p in ("/", "/quotes", "/estimate?model=llama-3.2-1b") * 2} == {
        200}, "ordinary pages are not limited"


@pytest.fixture(scope="module")
def pg_client(postgres_server_url: str) -> Iterator[TestClient]:
    """The pages on a fresh PostgreSQL database (``int4`` ids; no NUL in text), with the shipped catalog."""
    with fresh_postgres_database(postgres_server_url) as url:
        settings = Settings(database_url=url, rate_limit_web_writes="100000/minute")
        with TestClient(create_app(settings)) as client:
            yield client


@pytest.mark.postgres
def test_pages_on_postgresql_bound_ids_refuse_nul_and_fold_customers(pg_client: TestClient) -> None:
    for path in ("/quotes/9223372036854775807", "/quotes/2147483648", "/plans/99999999999999999999",
                 "/quotes?page=99999999999999999999", "/quotes?q=a%00b", "/quotes?customer=a%00b"):
        assert pg_client.get(path).status_code == 422, path
    assert pg_client.get("/quotes/2147483647").status_code == 404, "the largest int4 id is simply not there"
    assert pg_client.get("/quotes?page=40001").status_code == 200
    nul = {"query": JOB, "name": "a\x00b", "customer": "c", "price": "1"}
    assert pg_client.post("/quotes", data=nul, headers=SAME_ORIGIN).status_code == 422
    assert pg_client.post("/plans", data=nul, headers=SAME_ORIGIN).status_code == 422
    good = {"query": JOB, "name": "pg", "customer": "Ácme ☃", "price": "1"}
    saved = pg_client.post("/quotes", data=good, headers=SAME_ORIGIN, follow_redirects=False)
    assert saved.status_code == 303
    path = urlsplit(saved.headers["location"]).path
    assert f'href="{path}"' in pg_client.get("/quotes", params={"customer": "ÁCME ☃"}).text
    assert pg_client.post(f"{path}/recompute", headers=SAME_ORIGIN, follow_redirects=False).status_code == 303


def test_a_result_that_does_not_fit_links_each_way_out(client: TestClient) -> None:
    """Llama 3.1 70B LoRA on an 8x H100 XE9680 without checkpointing does not fit; the page lists the
    re-estimated changes, and following the first link gives a result that fits."""
    query = "model=llama-3.1-70b&training.method=lora&parallelism.sharding=fsdp&hardware.server=dell-xe9680-h100"
    html = client.get(f"/estimate?{query}").text
    assert 'id="ways-out"' in html and "Ways to make it fit" in html
    links = re.findall(r'<a href="([^"]+)" class="way-out">', html)
    assert links, "each suggestion has a link"
    followed = client.get(links[0].replace("&amp;", "&")).text
    assert "training.activation_checkpointing=full" in links[0].replace("&amp;", "&")
    assert 'id="ways-out"' not in followed and "Does not fit" not in followed
