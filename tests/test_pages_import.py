"""``POST /import``: a pasted or uploaded config fills the home page's form, runs the estimate and shows the reading
report; a bad file is named next to the field; a post from another site is refused (app.web.guard)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app

DATA = Path(__file__).parent / "data" / "configs"
SAME = {"Origin": "http://testserver"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("imports") / "pages.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_writes="100000/minute", rate_limit_web_pages="100000/minute")
    with TestClient(create_app(settings)) as client:
        yield client


def test_the_home_page_offers_the_import(client: TestClient) -> None:
    html = client.get("/").text
    assert 'action="/import"' in html and 'name="config"' in html and 'type="file"' in html


def test_a_pasted_torchtune_recipe_fills_the_form(client: TestClient) -> None:
    r = client.post("/import", data={"config": (DATA / "torchtune/70B_lora.yaml").read_text()}, headers=SAME)
    assert r.status_code == 200, r.text[:500]
    html = r.text
    assert re.search(r'<option value="llama-3.1-70b" selected>', html)
    assert re.search(r'id="f-training-method-lora"[^>]*checked', html)
    assert 'id="import-report"' in html and "model._component_" in html
    assert 'id="estimate-result"' in html


def test_uploaded_files_are_read_together(client: TestClient) -> None:
    files = [("files", ("qwen3_lora_sft_ds3.yaml", (DATA / "llama-factory/qwen3_lora_sft_ds3.yaml").read_bytes())),
             ("files", ("ds_z3_config.json", (DATA / "llama-factory/ds_z3_config.json").read_bytes()))]
    r = client.post("/import", files=files, headers=SAME)
    assert r.status_code == 200
    assert 'id="import-needs"' in r.text and "Qwen/Qwen3-4B-Instruct-2507" in r.text  # the model is asked for
    assert "ds_z3_config.json</code> (deepspeed)" in r.text


def test_a_bad_config_is_named_beside_the_field(client: TestClient) -> None:
    r = client.post("/import", data={"config": "a: !!python/object/apply:os.system ['id']"}, headers=SAME)
    assert r.status_code == 422
    assert re.search(r'id="err-f-import-config"[^>]*>pasted config: line 1: the tag', r.text)
    assert client.post("/import", data={"config": ""}, headers=SAME).status_code == 422


def test_another_site_cannot_post(client: TestClient) -> None:
    r = client.post("/import", data={"config": "base_model: x/y"}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
