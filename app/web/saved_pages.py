"""Saved quotes and plans: save from a result, list, open (any revision), re-compute, print.

Ids, revisions and page numbers are bounded like the API's (``ItemId``, ``RevisionQuery``): out of range is a
422 page, never a database overflow. Form posts go through ``app.web.guard`` (same origin, rate limit)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session
from starlette.datastructures import QueryParams

from app.api.routes.saved_routes import ItemId, RevisionQuery
from app.core.metrics import Metrics
from app.deps import CatalogDep, MetricsDep, SessionDep
from app.errors import ApiError, NotFound
from app.models import SavedItem, SavedRevision
from app.repositories.saved import MAX_OFFSET, list_items
from app.schemas.saved import PlanCreate, QuoteCreate
from app.services.saved import SAVERS, find_revision, find_saved, recompute_saved
from app.web import backend
from app.web.estimate_page import estimate_context, run_form
from app.web.forms import request_to_query
from app.web.serve_page import serving_request
from app.web.templating import render
from estimator import EstimateRequest, EstimateResponse, EstimatorError

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["router"]

router = APIRouter()

Kind = Literal["quote", "plan"]
KINDS: tuple[Kind, ...] = ("quote", "plan")
WEB_ACTOR = "web"
PAGE_SIZE = 25
#: the last page the API's offset bound can reach
MAX_PAGE = MAX_OFFSET // PAGE_SIZE + 1
PageQuery = Annotated[int, Query(ge=1, le=MAX_PAGE)]
FilterQuery = Annotated[str | None, Query(max_length=200)]
_SAVE_FIELDS = ("name", "customer", "price", "currency", "notes")
#: where the JSON API serves each kind (and its JSON/CSV/print exports)
_API_BASE = {"quote": "/api/v1/quotes", "plan": "/api/v1/saved-plans"}


def _plural(kind: Kind) -> str:
    return f"{kind}s"


def _save(request: Request, session: Session, catalog: Catalog, metrics: Metrics, kind: Kind, query: str,
          submitted: dict[str, str], serve: str = "") -> Response:
    """Save the result that ``query`` reproduces as a quote or a plan, then show it (303 to its page); a quote
    saved from the Serve page also carries the serving line that ``serve`` (its query) reproduces. On bad
    input, the result page again (422) with the message next to the save field."""
    context, errors = run_form(catalog, QueryParams(query))
    inputs: EstimateRequest | None = context.get("inputs")
    if errors or inputs is None:
        return render(request, "estimate.html", {**context, "charts": True, "active": "home"}, status_code=422)
    text = {k: v.strip() for k, v in submitted.items()}
    serving = None
    if kind == "quote" and serve.strip():
        try:
            serving = serving_request(serve)
        except ValueError as exc:
            ctx = {**context, "charts": True, "active": "home", "save_errors": {"serving": str(exc)},
                   "save_values": submitted}
            return render(request, "estimate.html", ctx, status_code=422)
    try:
        body: BaseModel
        if kind == "quote":
            body = QuoteCreate(
                name=text["name"], customer=text["customer"], inputs=inputs, price=_price(text["price"]) or "0",
                currency=text["currency"].upper() or "USD", notes=text["notes"] or None,
                server_count=inputs.hardware.num_nodes, chosen_option=inputs.hardware.server or inputs.hardware.gpu,
                serving=serving,
            )
        else:
            body = PlanCreate(name=text["name"], inputs=inputs, notes=text["notes"] or None)
    except ValidationError as exc:
        save_errors = {str(e["loc"][0]): _plain(e) for e in exc.errors() if e["loc"] and e["loc"][0] in _SAVE_FIELDS}
        ctx = {**context, "charts": True, "active": "home", "save_errors": save_errors, "save_values": submitted}
        return render(request, "estimate.html", ctx, status_code=422)
    item = SAVERS[kind](session=session, catalog=catalog, body=body, actor=WEB_ACTOR)
    session.commit()
    metrics.saved.labels(kind).inc()
    return RedirectResponse(f"/{_plural(kind)}/{item.id}?saved=1", status_code=303)


def _price(raw: str) -> str:
    """The price as typed in the page's locale ("12.500,50" in pt-BR, "12,500.50" in English), as a plain decimal
    (app.formatting.parse_number); else as typed, for the contract's own message."""
    from app.core.i18n import current
    from app.formatting import parse_number

    locale = current()
    try:
        return str(parse_number(raw, "en_US" if locale == "en" else locale)) if raw else raw
    except ValueError:
        return raw


def _save_page(kind: Kind) -> Callable[..., Response]:
    def save_page(
        request: Request,
        session: SessionDep,
        catalog: CatalogDep,
        metrics: MetricsDep,
        query: Annotated[str, Form()],
        name: Annotated[str, Form()] = "",
        customer: Annotated[str, Form()] = "",
        price: Annotated[str, Form()] = "",
        currency: Annotated[str, Form()] = "USD",
        notes: Annotated[str, Form()] = "",
        serve_query: Annotated[str, Form(max_length=20_000)] = "",
    ) -> Response:
        """Save the result that ``query`` reproduces as a named quote or plan, then show it (303 to its page). A
        plan has no customer, price or currency: the shared form sends them along, and they are kept only to
        show them again on an error."""
        submitted = {"name": name, "customer": customer, "price": price,
                     "currency": currency if kind == "quote" else "USD", "notes": notes}
        return _save(request, session, catalog, metrics, kind, query, submitted, serve_query)

    return save_page


for _kind in KINDS:
    router.add_api_route(f"/{_plural(_kind)}", _save_page(_kind), methods=["POST"], response_class=HTMLResponse,
                         name=f"save_{_kind}_page")


def _plain(err: Any) -> str:
    kind = err.get("type", "")
    if kind == "string_too_short":
        return "Required"
    if kind in ("decimal_parsing", "decimal_type"):
        return "Enter an amount, such as 125000"
    if kind == "greater_than_equal":
        return "Cannot be negative"
    return str(err.get("msg", "invalid"))


def _list_page(request: Request, session: Any, catalog: Catalog, kind: Kind, q: str | None, customer: str | None,
               page: int) -> HTMLResponse:
    q, customer = (q or "").strip(), (customer or "").strip()
    items, total = list_items(session=session, kind=kind, customer=customer or None, name=q or None,
                              limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    pages = max(1, -(-total // PAGE_SIZE))
    context = {
        "kind": kind, "items": [_summary(catalog, i) for i in items], "total": total, "page": page, "pages": pages,
        "q": q, "customer": customer, "active": "quotes",
    }
    return render(request, "saved_list.html", context)


def _summary(catalog: Catalog, item: SavedItem) -> dict[str, Any]:
    latest = item.revisions[-1] if item.revisions else None
    result = latest.result if latest is not None else {}
    memory = result.get("memory", {})
    return {
        "item": item, "latest": latest, "fits": memory.get("fits"),
        "model": result.get("model", {}).get("name", ""),
        "gpus": result.get("layout", {}).get("world_size"),
        "gpu": backend.gpu_name(catalog, str(result.get("layout", {}).get("gpu", ""))),
    }


@router.get("/quotes", response_class=HTMLResponse, name="quotes_page")
def quotes_page(
    request: Request, session: SessionDep, catalog: CatalogDep, q: FilterQuery = None, customer: FilterQuery = None,
    page: PageQuery = 1,
) -> HTMLResponse:
    return _list_page(request, session, catalog, "quote", q, customer, page)


@router.get("/plans", response_class=HTMLResponse, name="plans_page")
def plans_page(
    request: Request, session: SessionDep, catalog: CatalogDep, q: FilterQuery = None, page: PageQuery = 1,
) -> HTMLResponse:
    return _list_page(request, session, catalog, "plan", q, None, page)


def _detail_context(catalog: Catalog, item: SavedItem, rev: SavedRevision) -> dict[str, Any]:
    inputs = EstimateRequest.model_validate(rev.inputs)
    result = EstimateResponse.model_validate(rev.result)
    return {
        **estimate_context(catalog, inputs, result),
        "can_save": False, "item": item, "rev": rev, "kind": item.kind, "active": "quotes", "charts": True,
        "errors": {}, "form_query": request_to_query(inputs), "api_base": _API_BASE[item.kind],
    }


def _detail(request: Request, session: Any, catalog: Catalog, kind: Kind, item_id: int,
            revision: int | None) -> HTMLResponse:
    item = find_saved(session=session, kind=kind, item_id=item_id)
    rev = find_revision(item, revision)
    context = _detail_context(catalog, item, rev)
    context["saved_flash"] = request.query_params.get("saved") == "1"
    context["recomputed_flash"] = request.query_params.get("recomputed") == "1"
    return render(request, "saved_detail.html", context)


def _recompute(request: Request, session: Any, catalog: Catalog, kind: Kind, item_id: int) -> Response:
    try:
        done = recompute_saved(session=session, catalog=catalog, kind=kind, item_id=item_id, actor=WEB_ACTOR)
    except NotFound:
        raise
    except (ApiError, EstimatorError) as exc:
        session.rollback()
        item = find_saved(session=session, kind=kind, item_id=item_id)
        context = _detail_context(catalog, item, item.revisions[-1])
        context["recompute_error"] = getattr(exc, "detail", None) or str(exc)
        return render(request, "saved_detail.html", context, status_code=409)
    return RedirectResponse(f"/{_plural(kind)}/{done.item.id}?recomputed=1", status_code=303)


def _pages(kind: Kind) -> tuple[Callable[..., HTMLResponse], Callable[..., Response]]:
    def detail_page(request: Request, session: SessionDep, catalog: CatalogDep, item_id: ItemId,
                    revision: RevisionQuery = None) -> HTMLResponse:
        return _detail(request, session, catalog, kind, item_id, revision)

    def recompute_page(request: Request, session: SessionDep, catalog: CatalogDep, item_id: ItemId) -> Response:
        return _recompute(request, session, catalog, kind, item_id)

    return detail_page, recompute_page


for _kind in KINDS:
    _detail_page, _recompute_page = _pages(_kind)
    router.add_api_route(f"/{_plural(_kind)}/{{item_id}}", _detail_page, methods=["GET"],
                         response_class=HTMLResponse, name=f"{_kind}_page")
    router.add_api_route(f"/{_plural(_kind)}/{{item_id}}/recompute", _recompute_page, methods=["POST"],
                         name=f"recompute_{_kind}_page")
