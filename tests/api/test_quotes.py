"""Quotes: save with the full result and versions, read, page, filter, recompute into revisions, delete, export."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.models import SavedRevision
from tests.api.conftest import BOTH_BACKENDS
from tests.api.problems import assert_problem

pytestmark = BOTH_BACKENDS

URL = "/api/v1/quotes"
INPUTS = {"model": "llama-3.2-1b", "hardware": {"server": "dgx-a100-80gb", "gpu": "a100-sxm4-80gb"}}
QUOTE = {"name": "1B full fine-tune", "customer": "Acme", "inputs": INPUTS, "chosen_option": "dgx-a100-80gb",
         "server_count": 2, "price": "399999.99", "notes": "list price minus 0%"}


def _save(client: TestClient, auth: dict[str, str], **changes: Any) -> dict[str, Any]:
    r = client.post(URL, json={**QUOTE, **changes}, headers=auth)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_saved_quote_keeps_inputs_result_and_versions(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth)
    rev = saved["revision"]
    assert (saved["name"], saved["customer"], saved["latest_revision"]) == ("1B full fine-tune", "Acme", 1)
    assert (rev["chosen_option"], rev["server_count"], rev["price"], rev["currency"]) == (
        "dgx-a100-80gb", 2, 399999.99, "USD")
    assert rev["inputs"]["training"]["seq_len"] == 4096  # defaults stored explicitly
    assert rev["result"]["memory"]["fits"] is True
    assert (rev["estimator_version"], rev["catalog_version"]) == (rev["result"]["estimator_version"], "test-1")
    assert client.get(f"{URL}/{saved['id']}").json() == saved


def test_list_pages_and_filters(client: TestClient, auth: dict[str, str]) -> None:
    for i in range(5):
        _save(client, auth, name=f"quote {i}", customer="Acme" if i % 2 else "Globex")
    _save(client, auth, name="100%_special", customer="Initech")
    page = client.get(URL, params={"limit": 2, "offset": 1}).json()
    assert (page["total"], page["limit"], page["offset"]) == (6, 2, 1)
    assert [q["name"] for q in page["items"]] == ["quote 4", "quote 3"]
    assert {q["name"] for q in client.get(URL, params={"customer": "acme"}).json()["items"]} == {
        "quote 1", "quote 3"}
    assert [q["name"] for q in client.get(URL, params={"name": "0%_"}).json()["items"]] == ["100%_special"]
    assert client.get(URL, params={"name": "%"}).json()["total"] == 1


@pytest.mark.parametrize(("params", "field"), [({"limit": 0}, "query.limit"), ({"limit": 101}, "query.limit"),
                                               ({"offset": -1}, "query.offset"), ({"customer": ""}, "query.customer")])
def test_bad_paging_is_422(client: TestClient, params: dict[str, Any], field: str) -> None:
    assert_problem(client.get(URL, params=params), 422, field)


@pytest.mark.parametrize(("change", "field"), [
    ({"inputs": {"training": {"seq_len": 0}}}, "inputs.training.seq_len"),
    ({"inputs": {"hardware": {"gpu": "nope"}}}, "inputs.hardware.gpu"),
    ({"price": -1}, "price"),
    ({"price": "1.001"}, "price"),
    ({"server_count": 0}, "server_count"),
    ({"currency": "usd"}, "currency"),
    ({"name": ""}, "name"),
    ({"customer": None}, "customer"),
    ({"surprise": True}, "surprise"),
])
def test_bad_quotes_are_422_naming_the_field(
    client: TestClient, auth: dict[str, str], change: dict[str, Any], field: str
) -> None:
    assert_problem(client.post(URL, json={**QUOTE, **change}, headers=auth), 422, field)


@pytest.mark.parametrize("path", ["/999", "/999.json", "/999.csv", "/999/print"])
def test_unknown_quotes_are_404(client: TestClient, path: str) -> None:
    assert_problem(client.get(URL + path), 404)


def test_unknown_quote_writes_are_404(client: TestClient, auth: dict[str, str]) -> None:
    assert_problem(client.post(f"{URL}/999/recompute", headers=auth), 404)
    assert_problem(client.delete(f"{URL}/999", headers=auth), 404)


def test_a_quote_id_must_be_a_positive_integer(client: TestClient) -> None:
    assert_problem(client.get(f"{URL}/abc"), 404)
    assert_problem(client.get(f"{URL}/0"), 422, "path.item_id")


def test_recompute_with_nothing_changed_adds_an_empty_revision(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth)
    r = client.post(f"{URL}/{saved['id']}/recompute", headers=auth)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["previous_revision"], body["new_revision"], body["changed"], body["diff"]) == (1, 2, False, [])
    assert body["saved"]["revision"]["reason"] == "recomputed"
    assert body["saved"]["revision"]["price"] == 399999.99  # the quoted price is carried, not recomputed


def test_recompute_after_an_override_shows_what_changed(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth)
    client.patch("/api/v1/catalog/gpus/a100-sxm4-80gb", json={"set": {"memory_bytes": 40 * 2**30},
                                                              "reason": "test"}, headers=auth)
    body = client.post(f"{URL}/{saved['id']}/recompute", headers=auth).json()
    paths = {c["path"]: c for c in body["diff"]}
    assert paths["memory.capacity_bytes"]["before"] == 80 * 2**30
    assert paths["memory.capacity_bytes"]["after"] == 40 * 2**30
    assert "catalog_version" in paths
    first = client.get(f"{URL}/{saved['id']}", params={"revision": 1}).json()["revision"]
    assert first == saved["revision"]  # the saved revision is untouched
    latest = client.get(f"{URL}/{saved['id']}").json()
    assert latest["latest_revision"] == 2
    assert [r["changes"] for r in latest["revisions"]] == [None, len(body["diff"])]


def test_a_dry_run_stores_nothing(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth)
    body = client.post(f"{URL}/{saved['id']}/recompute", params={"dry_run": True}, headers=auth).json()
    assert body["new_revision"] is None
    assert client.get(f"{URL}/{saved['id']}").json()["latest_revision"] == 1


def test_recompute_conflicts_when_the_inputs_no_longer_compute(
    client: TestClient, auth: dict[str, str], sessions: sessionmaker[Session]
) -> None:
    saved = _save(client, auth)
    with sessions() as session:
        rev = session.scalars(select(SavedRevision)).one()
        rev.inputs = {**rev.inputs, "hardware": {**rev.inputs["hardware"], "server": "retired-server"}}
        session.commit()
    assert_problem(client.post(f"{URL}/{saved['id']}/recompute", headers=auth), 409, "inputs.hardware.server")
    with sessions() as session:
        session.scalars(select(SavedRevision)).one().inputs = {"unknown_field": 1}
        session.commit()
    assert_problem(client.post(f"{URL}/{saved['id']}/recompute", headers=auth), 409, "inputs.unknown_field")


def test_an_unknown_revision_is_404(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth)
    assert_problem(client.get(f"{URL}/{saved['id']}", params={"revision": 7}), 404)


def test_delete_hides_the_quote(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth)
    assert client.delete(f"{URL}/{saved['id']}", headers=auth).status_code == 204
    assert_problem(client.get(f"{URL}/{saved['id']}"), 404)
    assert_problem(client.delete(f"{URL}/{saved['id']}", headers=auth), 404)
    assert client.get(URL).json()["total"] == 0


def test_json_export_has_every_revision(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth)
    client.post(f"{URL}/{saved['id']}/recompute", headers=auth)
    r = client.get(f"{URL}/{saved['id']}.json")
    assert r.headers["content-disposition"] == f'attachment; filename="quote-{saved["id"]}.json"'
    assert [rev["number"] for rev in r.json()["revisions"]] == [1, 2]


def test_csv_export_is_field_value_rows(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth)
    r = client.get(f"{URL}/{saved['id']}.csv")
    assert r.headers["content-type"].startswith("text/csv")
    rows = dict(csv.reader(io.StringIO(r.text)))
    assert rows["customer"] == "Acme"
    assert rows["price"] == "399999.99"
    assert rows["inputs.model"] == "llama-3.2-1b"
    assert rows["result.memory.fits"] == "True"


def test_print_page_is_self_contained_html(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth, name="<script>alert(1)</script>")
    r = client.get(f"{URL}/{saved['id']}/print")
    assert r.headers["content-type"].startswith("text/html")
    assert "&lt;script&gt;" in r.text and "<script>" not in r.text
    assert "$399,999.99" in r.text  # the quoted price to the cent (app/formatting.py, Babel)
    assert "http://" not in r.text and "https://" not in r.text
