"""Text the databases treat differently: NUL characters (PostgreSQL cannot store them) are a 422 naming the
field; customer and name filters ignore case in every script, on SQLite and on PostgreSQL alike."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import BOTH_BACKENDS
from tests.api.problems import assert_problem

pytestmark = BOTH_BACKENDS

URL = "/api/v1/quotes"
INPUTS = {"model": "llama-3.2-1b"}
QUOTE = {"name": "q", "customer": "c", "inputs": INPUTS, "price": 1}
TINY = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 128, "vocab_size": 100}
NUL_MESSAGE = "must not contain a NUL character"


@pytest.mark.parametrize(("body", "field"), [
    ({**QUOTE, "name": "a\u0000b"}, "name"),
    ({**QUOTE, "customer": "\u0000"}, "customer"),
    ({**QUOTE, "notes": "x\u0000"}, "notes"),
    ({**QUOTE, "chosen_option": "a\u0000"}, "chosen_option"),
    ({**QUOTE, "inputs": {"model": {**TINY, "name": "a\u0000b"}}}, "inputs.model.name"),
    ({**QUOTE, "inputs": {"model": {"hf_config": {"model_type": "llama", "x\u0000": 1}}}},
     "inputs.model.hf_config.x\u0000"),
])
def test_nul_in_a_quote_is_a_422_naming_the_field(
    client: TestClient, auth: dict[str, str], body: dict[str, Any], field: str
) -> None:
    problem = assert_problem(client.post(URL, json=body, headers=auth), 422, field)
    assert NUL_MESSAGE in problem["errors"][0]["detail"]
    assert client.get(URL).json()["total"] == 0, "nothing was stored"


@pytest.mark.parametrize(("method", "url", "body", "field"), [
    ("GET", f"{URL}?customer=a%00b", None, "query.customer"),
    ("GET", f"{URL}?name=%00", None, "query.name"),
    ("GET", "/api/v1/saved-plans?name=a%00", None, "query.name"),
    ("GET", "/api/v1/catalog/gpus/a%00b", None, "path.entry_id"),
    ("POST", "/api/v1/saved-plans", {"name": "p\u0000", "inputs": INPUTS}, "name"),
    ("POST", "/api/v1/catalog/servers", {"id": "x", "name": "\u0000", "gpu_id": "h100-sxm5-80gb", "gpu_count": 8},
     "name"),
    ("PATCH", "/api/v1/catalog/servers/dgx-a100-80gb", {"set": {"price_usd": 1}, "reason": "r\u0000"}, "reason"),
    ("PATCH", "/api/v1/catalog/servers/dgx-a100-80gb", {"set": {"name": "n\u0000"}, "reason": "r"}, "set.name"),
    ("POST", "/api/v1/estimates", [INPUTS, {"model": {**TINY, "name": "\u0000"}}], "1.model.name"),
    ("POST", "/api/v1/compare", {"request": {"model": "x\u0000"}, "options": [{"gpu": "h100-sxm5-80gb"}]},
     "request.model"),
])
def test_nul_anywhere_in_the_api_is_a_422_naming_the_field(
    client: TestClient, auth: dict[str, str], method: str, url: str, body: Any, field: str
) -> None:
    assert_problem(client.request(method, url, json=body, headers=auth), 422, field)


def test_an_escaped_backslash_before_u0000_is_not_a_nul(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post(URL, json={**QUOTE, "notes": "C:\\u0000"}, headers=auth)
    assert r.status_code == 201, r.text
    assert r.json()["revision"]["notes"] == "C:\\u0000"


CUSTOMERS = ["Ácme ☃", "Straße AG", "ΣΊΣΥΦΟΣ", "plain"]


@pytest.mark.parametrize(("customer", "query", "found"), [
    ("Ácme ☃", "Ácme ☃", True),
    ("Ácme ☃", "ácme ☃", True),
    ("Ácme ☃", "ÁCME ☃", True),
    ("Ácme ☃", "A\u0301cme ☃", True),  # the same letter typed as A + combining acute
    ("Straße AG", "STRASSE AG", True),
    ("ΣΊΣΥΦΟΣ", "σίσυφος", True),
    ("plain", "PLAIN", True),
    ("Ácme ☃", "Acme ☃", False),  # accents still count
    ("Ácme ☃", "Ácme", False),  # the whole name, not a part
])
def test_the_customer_filter_ignores_case_in_every_script(
    client: TestClient, auth: dict[str, str], customer: str, query: str, found: bool
) -> None:
    for name in CUSTOMERS:
        assert client.post(URL, json={**QUOTE, "name": f"for {name}", "customer": name}, headers=auth).is_success
    listed = client.get(URL, params={"customer": query}).json()
    assert [q["customer"] for q in listed["items"]] == ([customer] if found else [])


def test_the_name_filter_finds_any_part_in_any_case(client: TestClient, auth: dict[str, str]) -> None:
    for name in ("Übergröße ☃ Ω", "ordinary", "50%_off"):
        assert client.post(URL, json={**QUOTE, "name": name}, headers=auth).is_success
    names = lambda q: [i["name"] for i in client.get(URL, params={"name": q}).json()["items"]]  # noqa: E731
    assert names("GRÖSSE") == ["Übergröße ☃ Ω"]
    assert names("☃ ω") == ["Übergröße ☃ Ω"]
    assert names("%_") == ["50%_off"], "LIKE wildcards are literal"
    assert names("_") == ["50%_off"]


def test_saved_names_are_kept_exactly_as_sent(client: TestClient, auth: dict[str, str]) -> None:
    saved = client.post(URL, json={**QUOTE, "name": "  Ünïcode ☃ ", "customer": "ÁCME"}, headers=auth).json()
    again = client.get(f"{URL}/{saved['id']}").json()
    assert (again["name"], again["customer"]) == ("  Ünïcode ☃ ", "ÁCME")
