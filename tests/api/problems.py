"""``assert_problem``: the one check of the error shape, used by every API test."""

from __future__ import annotations

from typing import Any

import httpx2


def assert_problem(response: httpx2.Response, status: int, *fields: str) -> dict[str, Any]:
    """The response is an RFC 9457 problem with ``status`` whose ``errors`` name each of ``fields``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert set(body) >= {"type", "title", "status", "detail", "instance", "request_id", "errors"}
    assert body["status"] == status
    assert body["request_id"] == response.headers["x-request-id"]
    assert "Traceback" not in response.text
    named = {e["field"] for e in body["errors"]}
    for field in fields:
        assert field in named, f"{field!r} not in {sorted(named)}"
    return body
