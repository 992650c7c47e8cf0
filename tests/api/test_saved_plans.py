"""Saved plans share the quote machinery: save, read, recompute into revisions, delete, export."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.conftest import BOTH_BACKENDS
from tests.api.problems import assert_problem

pytestmark = BOTH_BACKENDS

URL = "/api/v1/saved-plans"
PLAN = {"name": "8B on one node", "inputs": {"model": "llama-3.2-1b"}, "notes": "from the sizing page"}


def test_save_read_recompute_delete(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post(URL, json=PLAN, headers=auth)
    assert r.status_code == 201, r.text
    saved = r.json()
    assert (saved["kind"], saved["customer"], saved["revision"]["price"]) == ("plan", None, None)
    assert client.get(f"{URL}/{saved['id']}").json() == saved
    assert client.get(URL).json()["items"][0]["id"] == saved["id"]
    assert client.post(f"{URL}/{saved['id']}/recompute", headers=auth).json()["new_revision"] == 2
    assert client.get(f"{URL}/{saved['id']}.json").json()["revisions"][1]["reason"] == "recomputed"
    assert "8B on one node" in client.get(f"{URL}/{saved['id']}/print").text
    assert client.get(f"{URL}/{saved['id']}.csv").status_code == 200
    assert client.delete(f"{URL}/{saved['id']}", headers=auth).status_code == 204
    assert_problem(client.get(f"{URL}/{saved['id']}"), 404)


def test_plans_and_quotes_do_not_mix(client: TestClient, auth: dict[str, str]) -> None:
    plan = client.post(URL, json=PLAN, headers=auth).json()
    assert_problem(client.get(f"/api/v1/quotes/{plan['id']}"), 404)
    assert client.get("/api/v1/quotes").json()["total"] == 0


def test_bad_plans_are_422(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post(URL, json={**PLAN, "inputs": {"parallelism": {"tp": 0}}}, headers=auth)
    assert_problem(r, 422, "inputs.parallelism.tp")
    assert_problem(client.post(URL, json={"inputs": {}}, headers=auth), 422, "name")
