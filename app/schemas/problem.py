"""RFC 9457 problem details, the body of every API error."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["PROBLEM_MEDIA_TYPE", "FieldError", "Problem", "problem_responses"]

PROBLEM_MEDIA_TYPE = "application/problem+json"

_DESCRIPTIONS = {
    400: "Bad request",
    401: "Missing, unknown or revoked API key",
    404: "No such resource",
    409: "Conflicts with the current state",
    413: "Request too large",
    422: "Invalid input; `errors` names each field",
    429: "Rate limit exceeded; see Retry-After",
    501: "Not implemented yet",
    503: "Busy: past the per-request time cap, or the server is overloaded; see Retry-After",
}


class FieldError(BaseModel):
    field: str = Field(description="dotted path into the request body, query or path, e.g. training.seq_len")
    pointer: str = Field(description="the same path as a JSON pointer fragment, e.g. #/training/seq_len")
    detail: str
    type: str | None = Field(default=None, description="machine-readable error kind")


class Problem(BaseModel):
    type: str = Field(description="URI identifying the kind of problem")
    title: str
    status: int
    detail: str
    instance: str = Field(description="the request path")
    request_id: str = Field(description="also in the X-Request-ID response header")
    errors: list[FieldError] = Field(default_factory=list)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for ``statuses``, all ``application/problem+json``."""
    schema = {"$ref": "#/components/schemas/Problem"}
    return {
        status: {"description": _DESCRIPTIONS.get(status, "Error"), "content": {PROBLEM_MEDIA_TYPE: {"schema": schema}}}
        for status in statuses
    }
