"""``POST /api/v1/estimates``: one request → one response; a JSON list → a list (at most ``MAX_BATCH``).

The route is ``async``: one estimate (a fraction of a millisecond of CPU) runs on the event loop, which costs
less than the two thread-pool hops a plain function gets (the call, then re-validating its result); a list,
up to ``MAX_BATCH`` estimates, goes to a worker thread so it does not hold the loop. The result is dumped to
JSON by the same pydantic adapter FastAPI would use for ``response_model`` (the same bytes) without
re-validating the typed result first, and answered as is. A single request equal to a recent one, against the
same catalog, gets the same bytes from ``app.state.estimate_answers`` (:class:`AnswerCache`); the same request
bytes again are answered before the router (``app.api.replay``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool

from app.api.replay import ReplayAnswers, replay_key
from app.core.metrics import Metrics
from app.deps import get_catalog
from app.schemas.problem import problem_responses
from app.services.estimates import MAX_BATCH, AnswerCache, parse_one_or_many, run_estimate, run_many
from estimator import EstimateRequest, EstimateResponse

router = APIRouter(prefix="/estimates", tags=["estimates"])

_BODY_SCHEMA = {
    "oneOf": [
        {"$ref": "#/components/schemas/EstimateRequest"},
        {"type": "array", "items": {"$ref": "#/components/schemas/EstimateRequest"}, "maxItems": MAX_BATCH},
    ]
}
_RESPONSE_SCHEMA = {
    "oneOf": [
        {"$ref": "#/components/schemas/EstimateResponse"},
        {"type": "array", "items": {"$ref": "#/components/schemas/EstimateResponse"}},
    ]
}


#: what FastAPI's ``response_model`` would dump with (``by_alias=True`` is its default, and pydantic's)
_RESPONSE: TypeAdapter[EstimateResponse | list[EstimateResponse]] = TypeAdapter(
    EstimateResponse | list[EstimateResponse])


@router.post(
    "",
    response_model=EstimateResponse | list[EstimateResponse],
    responses={
        200: {"content": {"application/json": {"schema": _RESPONSE_SCHEMA}}},
        **problem_responses(422),
    },
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": _BODY_SCHEMA}}}},
    summary="Estimate memory, speed and cost of one training setup (or a list of them)",
)
async def create_estimates(
    request: Request,
    payload: Annotated[Any, Body()],
) -> Response:
    """The estimator-core contract. Send one `EstimateRequest` object, or a JSON array of them to get an
    array back in the same order. Errors name the field, prefixed by the index for a list (`2.training.seq_len`)."""
    metrics: Metrics = request.app.state.metrics
    catalog = await get_catalog(request)  # called, not declared: a dependency costs FastAPI more than this
    if isinstance(payload, list):
        parsed = await run_in_threadpool(parse_one_or_many, payload)
        assert isinstance(parsed, list)
        metrics.estimates.labels("estimates").inc(len(parsed))
        results = await run_in_threadpool(run_many, parsed, catalog)
        return Response(content=_RESPONSE.dump_json(results, by_alias=True), media_type="application/json")
    one = parse_one_or_many(payload)
    assert not isinstance(one, list)
    metrics.estimates.labels("estimates").inc()
    answers: AnswerCache = request.app.state.estimate_answers
    body = answers.answer(one, catalog, lambda: _RESPONSE.dump_json(run_estimate(one, catalog), by_alias=True))
    key = replay_key(request.scope, await request.body())  # read already: cached
    if key is not None:
        replay: ReplayAnswers = request.app.state.estimate_replay
        replay.remember(key, catalog, body)
    return Response(content=body, media_type="application/json")


__all__ = ["EstimateRequest", "router"]
