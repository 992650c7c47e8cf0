"""The pages' cost lines (issue 16), through TestClient on the shipped catalog: no time or cost for a setup
that does not fit (the suggestions that fit are priced instead), the basis named, the NVL gaps said plainly."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app

TOO_BIG = ("/estimate?model=llama-3.1-70b&training.method=full&training.train_tokens=1e9"
           "&hardware.gpu=a100-sxm4-80gb&hardware.server=nvidia-dgx-a100-640gb")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("cost-pages") / "pages.db"
    with TestClient(create_app(Settings(database_url=f"sqlite:///{db}"))) as client:
        yield client


def _text(html: str) -> str:
    html = re.sub(r"<(script|style).*?</\1>", "", html, flags=re.S)
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_a_setup_that_does_not_fit_has_no_time_or_cost_but_its_suggestions_do(client: TestClient) -> None:
    html = client.get(TOO_BIG).text
    assert 'id="kpi-ttt"' not in html and 'id="kpi-cost"' not in html and 'id="kpi-tps"' not in html
    assert "no time or cost for this setup" in _text(html)
    priced = re.findall(r'<td class="num way-cost">\$([\d,.]+)</td>', html)
    assert priced, "the suggestions that fit show their cost to train"


def test_the_estimate_names_its_basis(client: TestClient) -> None:
    owned = client.get("/estimate?model=llama-3.1-8b&training.method=lora&training.train_tokens=2e8"
                       "&hardware.gpu=h100-sxm5-80gb&hardware.server=nvidia-dgx-h100").text
    assert re.search(r'id="cost-basis">owned: ', owned) and 'data-basis="own"' in owned
    rented = client.get("/estimate?model=llama-3.1-8b&training.method=lora&training.train_tokens=2e8"
                        "&hardware.gpu=h200-sxm-141gb").text
    assert 'id="cost-basis">rented: AWS p5en.48xlarge (on-demand' in rented


def test_the_nvl_gaps_are_said_plainly(client: TestClient) -> None:
    h200_nvl = _text(client.get("/estimate?model=llama-3.1-8b&training.method=lora&training.train_tokens=2e8"
                                "&hardware.gpu=h200-nvl-141gb").text)
    assert "no purchase price: no cost shown" in h200_nvl
    h100_nvl = _text(client.get("/estimate?model=llama-3.1-8b&training.method=lora&training.train_tokens=2e8"
                                "&hardware.gpu=h100-nvl-94gb&hardware.server=dell-r760xa-h100-nvl"
                                "&hardware.gpus_per_node=4").text)
    assert "No purchase price for Dell PowerEdge R760xa (4x H100 NVL)" in h100_nvl
    assert "priced as rent instead, not as owned" in h100_nvl
    catalog = _text(client.get("/catalog/gpus").text)
    assert "no purchase price in the catalog" in catalog
    assert "$15,000-$15,000" not in catalog and "$32,000-$32,000" not in catalog


def test_server_choices_name_their_gpus_never_by_id(client: TestClient) -> None:
    """The server dropdown (/estimate), the server checkboxes (/compare, /plan) and the TCO server select show
    "8x NVIDIA H100 SXM5 80GB", never a catalog GPU id such as ``h100-sxm5-80gb``."""
    from hardware_catalog import load_catalog

    catalog = load_catalog()
    for url in ("/estimate", "/compare?model=llama-3.1-8b&training.method=lora", "/plan", "/tco"):
        html = client.get(url).text
        options = [_text(o) for o in re.findall(r"<option[^>]*data-gpu=[^>]*>(.*?)</option>", html, re.S)]
        boxes = re.findall(r'<label><input type="checkbox" name="(?:constraints\.)?servers"[^>]*>(.*?)</label>',
                           html, re.S)
        labels = options + [_text(o) for o in boxes]
        assert labels, url
        for label in labels:
            assert not any(g in label for g in catalog.gpus), (url, label)
        server = catalog.servers["nvidia-dgx-h100"]
        if options:  # a select says what each server holds, by name
            assert any(f"{server.gpu_count}x {catalog.gpus[server.gpu_id].name}" in o for o in options), url
