"""Saving quotes and plans with their full result and versions, and recomputing them into new revisions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from app.errors import Conflict, NotFound, field_error, field_errors_from_locs
from app.models import SavedItem, SavedRevision
from app.repositories.saved import add_revision, create_item, get_item, get_revision
from app.schemas.saved import PlanCreate, QuoteCreate
from app.services.diff import json_diff
from app.services.estimates import prefix_error
from estimator import EstimateRequest, EstimateResponse, EstimatorError, estimate
from estimator.inference import InferenceRequest, estimate_inference

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["SAVERS", "Recomputed", "find_revision", "find_saved", "recompute", "recompute_saved", "save_plan",
           "save_quote"]


@dataclass(frozen=True)
class Recomputed:
    item: SavedItem
    previous: SavedRevision
    new: SavedRevision | None
    diff: list[dict[str, Any]]


def _computed(request: EstimateRequest, catalog: Catalog) -> dict[str, Any]:
    try:
        result: EstimateResponse = estimate(request, catalog)
    except EstimatorError as exc:
        raise prefix_error(exc, "inputs") from exc
    return {
        "input_kind": "estimate",
        "inputs": request.model_dump(mode="json"),
        "result": result.model_dump(mode="json"),
        "estimator_version": result.estimator_version,
        "catalog_version": result.catalog_version,
    }


def _serving_computed(request: InferenceRequest | None, catalog: Catalog) -> dict[str, Any]:
    """The serving line of a quote: the inference request (defaults filled in) and its response; both null
    when the quote has none."""
    if request is None:
        return {"serving_inputs": None, "serving_result": None}
    try:
        result = estimate_inference(request, catalog)
    except EstimatorError as exc:
        raise prefix_error(exc, "serving") from exc
    return {"serving_inputs": request.model_dump(mode="json"), "serving_result": result.model_dump(mode="json")}


def save_quote(*, session: Session, catalog: Catalog, body: QuoteCreate, actor: str) -> SavedItem:
    revision = _computed(body.inputs, catalog) | _serving_computed(body.serving, catalog) | {
        "chosen_option": body.chosen_option, "server_count": body.server_count, "price": body.price,
        "currency": body.currency, "notes": body.notes,
    }
    return create_item(session=session, kind="quote", name=body.name, customer=body.customer, actor=actor,
                       revision=revision)


def save_plan(*, session: Session, catalog: Catalog, body: PlanCreate, actor: str) -> SavedItem:
    revision = _computed(body.inputs, catalog) | {"notes": body.notes}
    return create_item(session=session, kind="plan", name=body.name, customer=None, actor=actor,
                       revision=revision)


#: how each kind is saved (the API's create routes and the pages' Save share it)
SAVERS: dict[str, Callable[..., SavedItem]] = {"quote": save_quote, "plan": save_plan}


def find_saved(*, session: Session, kind: str, item_id: int, for_update: bool = False) -> SavedItem:
    item = get_item(session=session, kind=kind, item_id=item_id, for_update=for_update)
    if item is None:
        raise NotFound(f"no {kind} {item_id}")
    return item


def find_revision(item: SavedItem, number: int | None) -> SavedRevision:
    """Revision ``number`` of ``item`` (the latest when ``None``); 404 when it has none of that number."""
    rev = get_revision(item, number)
    if rev is None:
        raise NotFound(f"{item.kind} {item.id} has no revision {number}")
    return rev


def _still_valid(latest: SavedRevision) -> EstimateRequest:
    try:
        return EstimateRequest.model_validate(latest.inputs)
    except ValidationError as exc:
        errors = field_errors_from_locs({**e, "loc": ("inputs", *e["loc"])} for e in exc.errors())
        raise Conflict("the saved inputs are no longer valid for the current estimator", errors) from None


def _serving_still_valid(latest: SavedRevision) -> InferenceRequest | None:
    if latest.serving_inputs is None:
        return None
    try:
        return InferenceRequest.model_validate(latest.serving_inputs)
    except ValidationError as exc:
        errors = field_errors_from_locs({**e, "loc": ("serving", *e["loc"])} for e in exc.errors())
        raise Conflict("the saved serving line is no longer valid for the current estimator", errors) from None


def recompute(*, session: Session, catalog: Catalog, item: SavedItem, actor: str, store: bool = True) -> Recomputed:
    """Re-run the latest revision's inputs (and its serving line, if any) on the current estimator and catalog.
    With ``store`` the result becomes a new revision (the old ones are kept as they were); without, nothing is
    written. Changes to the serving line's result are in the diff under ``serving.``."""
    latest = item.revisions[-1]
    request = _still_valid(latest)
    serving = _serving_still_valid(latest)
    try:
        fresh = _computed(request, catalog) | _serving_computed(serving, catalog)
    except EstimatorError as exc:
        errors = [field_error((exc.field or "inputs").split("."), exc.message, "recompute-failed")]
        raise Conflict(f"the saved inputs no longer compute: {exc.message}", errors) from None
    changes = json_diff(latest.result, fresh["result"])
    if serving is not None:
        changes += json_diff(latest.serving_result, fresh["serving_result"], "serving")
    if not store:
        return Recomputed(item, latest, None, changes)
    carried = {"chosen_option": latest.chosen_option, "server_count": latest.server_count,
               "price": latest.price, "currency": latest.currency, "notes": latest.notes}
    new = add_revision(session=session, item=item, actor=actor, diff=changes, revision=fresh | carried)
    return Recomputed(item, latest, new, changes)


#: tries of one recompute that lost the race for the next revision number to a concurrent one (SQLite)
RECOMPUTE_ATTEMPTS = 8


def recompute_saved(*, session: Session, catalog: Catalog, kind: str, item_id: int, actor: str,
                    store: bool = True) -> Recomputed:
    """Recompute item ``item_id`` and commit its new revision; what the API and the pages' Re-compute call.

    Concurrent recomputes of one item take turns: on PostgreSQL the item's row is locked (``FOR UPDATE``)
    from the read of its latest revision to the commit; on SQLite a recompute that loses the race for the
    next revision number (the unique ``(item_id, number)``, or a write lock held past the busy timeout) rolls
    back and starts again from the then latest revision, up to :data:`RECOMPUTE_ATTEMPTS` times, then 409.
    Either way every revision is the recompute of the one before it, numbered without a gap."""
    for _attempt in range(RECOMPUTE_ATTEMPTS if store else 1):
        item = find_saved(session=session, kind=kind, item_id=item_id, for_update=store)
        try:
            done = recompute(session=session, catalog=catalog, item=item, actor=actor, store=store)
            if store:
                session.commit()
            return done
        except (IntegrityError, OperationalError) as exc:
            if isinstance(exc, OperationalError) and not _lost_race(exc):
                raise
            session.rollback()
            session.expunge_all()
    raise Conflict(f"{kind} {item_id} is being recomputed by others at the same time; try again")


def _lost_race(exc: OperationalError) -> bool:
    """SQLite's "database is locked" (a writer held the lock past the busy timeout): retry, not a fault."""
    return "locked" in str(exc.orig).lower() or "busy" in str(exc.orig).lower()
