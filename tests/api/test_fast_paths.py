"""What the API's speed work must not change (issue 19): the estimates route answers the bytes FastAPI's
``response_model`` would have; a repeated estimate is answered from memory only while the catalog is the same;
the catalog is re-checked after a write in this process, and after ``catalog_refresh_s`` for other processes;
``capplan serve --workers N`` refuses a per-process rate-limit store."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.core.catalog_cache import CatalogCache, catalog_generation
from app.models import utcnow
from app.repositories.catalog import list_entries
from app.services.estimates import AnswerCache
from estimator import EstimateRequest, EstimateResponse, estimate

ONE = {"model": "llama-3.2-1b", "training": {"seq_len": 2048}, "hardware": {"server": "dgx-a100-80gb"}}
UNION: TypeAdapter[Any] = TypeAdapter(EstimateResponse | list[EstimateResponse])


def test_the_answer_is_the_response_model_dump(client: TestClient, catalog: Any) -> None:
    """Single and list answers are byte for byte what validating through the declared response_model union and
    dumping it gives (FastAPI's own path, by_alias), with its media type."""
    request = EstimateRequest.model_validate(ONE)
    expected = UNION.dump_json(UNION.validate_python(estimate(request, catalog)), by_alias=True)
    r = client.post("/api/v1/estimates", json=ONE)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.content == expected
    again = client.post("/api/v1/estimates", content=json.dumps(ONE, indent=2).encode(),
                        headers={"content-type": "application/json"})
    assert again.content == expected, "a repeated request (other whitespace) gets the same bytes"
    many = client.post("/api/v1/estimates", json=[ONE, {"model": "llama-3.2-1b"}])
    other = EstimateRequest.model_validate({"model": "llama-3.2-1b"})
    assert many.content == UNION.dump_json(
        UNION.validate_python([estimate(request, catalog), estimate(other, catalog)]), by_alias=True)


def test_answers_are_kept_per_catalog_object() -> None:
    cache, calls = AnswerCache(size=2), []

    def compute(tag: str) -> bytes:
        calls.append(tag)
        return tag.encode()

    a = EstimateRequest.model_validate(ONE)
    same = EstimateRequest.model_validate(json.loads(json.dumps(ONE)))
    b = EstimateRequest.model_validate({"model": "llama-3.2-1b"})
    c = EstimateRequest.model_validate({"model": "llama-3.1-8b"})
    cat1, cat2 = object(), object()
    assert cache.answer(a, cat1, lambda: compute("a1")) == b"a1"
    assert cache.answer(same, cat1, lambda: compute("x")) == b"a1", "an equal request is a hit"
    assert cache.answer(a, cat2, lambda: compute("a2")) == b"a2", "another catalog object is a miss"
    cache.answer(b, cat2, lambda: compute("b"))
    cache.answer(c, cat2, lambda: compute("c"))  # size 2: a is the oldest, dropped
    assert cache.answer(a, cat2, lambda: compute("a3")) == b"a3"
    assert calls == ["a1", "a2", "b", "c", "a3"]


def test_a_request_that_cannot_be_hashed_is_computed_every_time() -> None:
    cache, calls = AnswerCache(), []
    request = EstimateRequest.model_validate({"model": {"hf_config": {
        "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 8192, "vocab_size": 128256}}})
    for _ in range(2):
        cache.answer(request, None, lambda: calls.append(1) or b"x")
    assert calls == [1, 1]


def test_the_catalog_is_checked_again_after_a_write_here(sessions: sessionmaker[Session], catalog: Any) -> None:
    cache = CatalogCache(catalog, refresh_s=3600)
    assert cache.fresh() is None, "never checked"
    with sessions() as session:
        first = cache.get(session)
    assert cache.fresh() is first
    before = catalog_generation()
    with sessions() as session:
        row = next(r for r in list_entries(session=session) if r.entry_id == "dgx-a100-80gb")
        row.overrides, row.updated_at = {"price_usd": 1}, utcnow()  # as apply_override does
        session.commit()
    assert catalog_generation() == before + 1
    assert cache.fresh() is None, "a commit that wrote a catalog row sends the next request to the database"
    with sessions() as session:
        second = cache.get(session)
    assert second is not first and second.version != first.version
    with sessions() as session:
        list_entries(session=session)
        session.commit()  # nothing written: no new generation
    assert cache.fresh() is second


def test_other_processes_changes_are_seen_after_refresh_s(sessions: sessionmaker[Session], catalog: Any) -> None:
    cache = CatalogCache(catalog, refresh_s=0)
    with sessions() as session:
        cache.get(session)
    assert cache.fresh() is None, "0 checks on every request"


def test_an_override_through_the_api_shows_in_the_next_estimate(client: TestClient, auth: dict[str, str]) -> None:
    before = client.post("/api/v1/estimates", json=ONE).json()
    r = client.patch("/api/v1/catalog/servers/dgx-a100-80gb", headers=auth,
                     json={"set": {"price_usd": 123456}, "reason": "test"})
    assert r.status_code == 200, r.text
    after = client.post("/api/v1/estimates", json=ONE).json()
    assert after["catalog_version"] != before["catalog_version"]


def test_serve_with_workers_needs_a_shared_rate_limit_store(monkeypatch: Any) -> None:
    from app.core.settings import get_settings

    monkeypatch.setenv("CAPPLAN_RATE_LIMIT_STORAGE", "memory://")
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["serve", "--workers", "2"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2
    assert "CAPPLAN_RATE_LIMIT_STORAGE" in result.stderr
