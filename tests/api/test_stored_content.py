"""Issue 15, findings 6-8: what is stored comes back safe and unchanged.

6. Catalog source links: only http(s) URLs are accepted (POST and PATCH name the field) and only they are
   rendered as links (a row planted before the check is never a link).
7. CSV exports: cells starting with ``=``, ``+``, ``-``, ``@``, tab or carriage return are neutralised.
8. A stored quote's inputs and result come back in the order they were written, on SQLite and PostgreSQL
   (PostgreSQL's JSONB reordered keys), so the CSV export is the same on both.

Runs on the shipped hardware catalog (its sources carry URLs; the API tests' fake catalog has none).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from app.exports.csv_safe import safe_cell
from app.exports.flatten import flatten
from app.models import CatalogEntry
from app.web.templating import templates
from estimator import EstimateRequest
from hardware_catalog import load_catalog
from tests.api.conftest import BOTH_BACKENDS
from tests.api.problems import assert_problem

GPUS = "/api/v1/catalog/gpus"
BAD_URLS = ["javascript:alert(document.domain)", "JaVaScRiPt:alert(1)", " javascript:alert(1)",
            "java\tscript:alert(1)", "vbscript:msgbox(1)", "data:text/html,<script>alert(1)</script>",
            "file:///etc/passwd", "//evil.example/x", "/relative", "http://"]


@pytest.fixture
def catalog() -> Any:
    return load_catalog()


def _custom_gpu(client: TestClient, url: str | None, new_id: str = "acme-h100") -> dict[str, Any]:
    data = dict(client.get(f"{GPUS}/h100-sxm5-80gb").json()["effective"])
    data["id"] = new_id
    data["field_sources"] = {}
    data["sources"] = [{"citation": "Acme data sheet", "url": url, "date": "2026-11-01"}]
    return data


@pytest.mark.parametrize("url", BAD_URLS)
@BOTH_BACKENDS
def test_a_posted_entry_with_a_non_web_source_url_is_a_422_naming_it(
    client: TestClient, auth: dict[str, str], url: str
) -> None:
    r = client.post(GPUS, json=_custom_gpu(client, url), headers=auth)
    assert_problem(r, 422, "sources.0.url")
    assert client.get(f"{GPUS}/acme-h100").status_code == 404


@BOTH_BACKENDS
def test_a_web_source_url_is_accepted_and_linked(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post(GPUS, json=_custom_gpu(client, "https://acme.example/h100.pdf"), headers=auth)
    assert r.status_code == 201, r.text
    page = client.get("/catalog/gpus/acme-h100")
    assert page.status_code == 200
    assert 'href="https://acme.example/h100.pdf"' in page.text


@pytest.mark.parametrize("url", BAD_URLS[:3] + BAD_URLS[4:6])
@BOTH_BACKENDS
def test_a_patch_with_a_non_web_source_url_is_a_422_naming_it(
    client: TestClient, auth: dict[str, str], url: str
) -> None:
    sources = [{"citation": "sales note", "url": url, "date": "2026-11-01"}]
    r = client.patch(f"{GPUS}/h100-sxm5-80gb", json={"set": {"sources": sources}, "reason": "link"}, headers=auth)
    assert_problem(r, 422, "set.sources.0.url")
    assert client.get(f"{GPUS}/h100-sxm5-80gb").json()["overrides"] == {}


@BOTH_BACKENDS
def test_a_row_planted_before_the_check_is_never_rendered_as_a_link(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    """An override written straight to the database (as one posted before the check was): the page shows no
    ``javascript:`` link (the entry falls back to its seeded data, whose links are http(s))."""
    with sessions() as session:
        row = session.query(CatalogEntry).filter_by(kind="gpu", entry_id="h100-sxm5-80gb").one()
        row.overrides = {"sources": [{"citation": "planted", "url": "javascript:alert(1)", "date": "2026"}]}
        session.commit()
    for path in ("/catalog", "/catalog/gpus", "/catalog/gpus/h100-sxm5-80gb", "/compare"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert "javascript:" not in page.text.lower(), path


@pytest.mark.parametrize("url", BAD_URLS)
def test_the_sources_macro_links_only_web_urls(url: str) -> None:
    """Rendering checks the scheme itself: a source object that never went through the catalog's model."""
    macro = templates.env.get_template("_sources.html").module
    bad = {"citation": "planted", "url": url, "date": "2026", "date_is_retrieval": False, "kind": None}
    good = {**bad, "url": "https://ok.example/x"}
    for rendered in (str(macro.sources([bad])), str(macro.sources_short([bad], "/more"))):  # type: ignore[attr-defined]
        assert "<a " not in rendered and "planted" in rendered
    assert 'href="https://ok.example/x"' in str(macro.sources([good]))  # type: ignore[attr-defined]


FORMULAS = {"name": "=HYPERLINK(\"https://evil.example\",\"open\")", "customer": "@SUM(1+1)*cmd|' /C calc'!A0",
            "notes": "+1+cmd|' /C calc'!A0"}


@BOTH_BACKENDS
def test_csv_export_neutralises_formula_cells(client: TestClient, auth: dict[str, str]) -> None:
    quote = {**FORMULAS, "inputs": {"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm5-80gb"}},
             "chosen_option": "-2+3+cmd|' /C calc'!A0", "server_count": 1, "price": 1000}
    saved = client.post("/api/v1/quotes", json=quote, headers=auth)
    assert saved.status_code == 201, saved.text
    r = client.get(f"/api/v1/quotes/{saved.json()['id']}.csv")
    assert r.status_code == 200
    rows = dict(csv.reader(io.StringIO(r.text)))
    assert rows["name"] == "'" + FORMULAS["name"]
    assert rows["customer"] == "'" + FORMULAS["customer"]
    assert rows["notes"] == "'" + FORMULAS["notes"]
    assert rows["chosen_option"] == "'-2+3+cmd|' /C calc'!A0"
    cells = [cell for row in csv.reader(io.StringIO(r.text)) for cell in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert rows["price"] == "1000.00"


@pytest.mark.parametrize(("value", "cell"), [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1+1", "'-1+1"), ("@A1", "'@A1"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("a=1", "a=1"), ("", ""), (-5, -5), (-0.5, -0.5), (None, None), (True, True),
])
def test_safe_cell(value: Any, cell: Any) -> None:
    assert safe_cell(value) == cell


_HF = {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 4,
       "num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 2048,
       "model_type": "llama", "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def _keys_in_order(value: Any) -> list[str]:
    return [path for path, _ in flatten(value)]


@BOTH_BACKENDS
def test_stored_json_keeps_its_key_order(client: TestClient, auth: dict[str, str], engine: Engine) -> None:
    """The stored text keeps the order the app wrote: the request model's field order, then the pasted
    config's own order (not sorted, not JSONB's by-length order), and the CSV follows it."""
    inputs = {"model": {"hf_config": _HF}, "hardware": {"gpu": "h100-sxm5-80gb"}, "training": {"seq_len": 1024}}
    saved = client.post("/api/v1/quotes", json={"name": "order", "customer": "Acme", "inputs": inputs,
                                                   "price": 1}, headers=auth)
    assert saved.status_code == 201, saved.text
    expected_inputs = EstimateRequest.model_validate(inputs).model_dump(mode="json")
    estimate = client.post("/api/v1/estimates", json=inputs).json()
    with engine.connect() as conn:
        stored_inputs, stored_result = conn.execute(text(
            "SELECT CAST(inputs AS TEXT), CAST(result AS TEXT) FROM saved_revisions")).one()
    assert _keys_in_order(json.loads(stored_inputs)) == _keys_in_order(expected_inputs)
    assert list(json.loads(stored_inputs)["model"]["hf_config"]) == list(_HF)
    assert _keys_in_order(json.loads(stored_result)) == _keys_in_order(estimate)
    rows = [row[0] for row in csv.reader(io.StringIO(client.get(f"/api/v1/quotes/{saved.json()['id']}.csv").text))]
    assert [r for r in rows if r.startswith("inputs.")] == _keys_in_order({"inputs": expected_inputs})
    assert [r for r in rows if r.startswith("result.")] == _keys_in_order({"result": estimate})
