"""Multi-option quotes (issue 28): two to four options of one job, picked on /compare, saved as one quote each
(named "<name>: option k of n, <option>") and shown side by side in one customer document, each with its
layout, per-GPU memory, time and cost to train, power per node and nodes per rack, the quoted price and what it
covers. ``POST /quotes/options`` saves them; ``GET /quotes/side-by-side?ids=..`` is the printable document
(``&lang=pt_BR`` in Portuguese), ``/quotes/side-by-side.pdf`` the same as a PDF (WeasyPrint).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from app.core.i18n import current as current_locale
from app.core.i18n import gettext as _
from app.core.i18n import using_locale
from app.deps import CatalogDep, SessionDep
from app.errors import ApiError, field_error
from app.exports.quote import PRICE_COVERS, display_names, quote_sections
from app.schemas.compare import CompareOption
from app.schemas.saved import QuoteCreate
from app.services.compare import common_basis, option_request
from app.services.saved import SAVERS, find_revision, find_saved
from app.web.forms import parse_form
from app.web.layout_suggestion import adopt_layout, best_plan
from app.web.templating import render
from estimator import EstimateRequest, EstimatorError
from estimator.tco.run_cost import CostChoice

__all__ = ["MAX_OPTIONS", "MIN_OPTIONS", "router"]

router = APIRouter()
MIN_OPTIONS, MAX_OPTIONS = 2, 4
WEB_ACTOR = "web"


def _option(value: str) -> tuple[str, CompareOption | None]:
    """``yours|gpu:h100-sxm5-80gb`` or ``planner|server:nvidia-dgx-h100`` (from /compare), ``own|server:X`` or
    ``rent|offer:ID@pricing`` (from /tco's per-run table) -> (kind, option)."""
    kind, _sep, what = value.partition("|")
    field, _sep, ident = what.partition(":")
    if kind in ("yours", "planner", "own") and field in ("gpu", "server") and ident:
        return kind, CompareOption(**{field: ident})
    if kind == "rent" and field == "offer" and ident:
        return f"rent:{ident}", None
    raise ValueError(value)


def _tco_request(job: EstimateRequest, kind: str, catalog: Any) -> EstimateRequest:
    """/tco's options keep the job's server and node count; ``own`` prices it owned, ``rent:ID@pricing`` on that
    cloud offer (the per-run table's own rows)."""
    if kind == "own":
        return job.model_copy(update={"cost": (job.cost or CostChoice()).model_copy(update={"basis": "own",
                                                                                            "offer_id": None})})
    offer_id, _sep, pricing = kind.removeprefix("rent:").partition("@")
    if not any(o.id == offer_id for o in catalog.cloud_offers):
        raise ValueError(offer_id)
    choice = (job.cost or CostChoice()).model_copy(update={"basis": "rent", "offer_id": offer_id,
                                                           "pricing": pricing or "on-demand"})
    return job.model_copy(update={"cost": CostChoice.model_validate(choice.model_dump())})


class _Invalid(ApiError):
    status, slug, title = 422, "invalid-request", "Invalid request"


def _problem(message: str) -> ApiError:
    return _Invalid(message, errors=[field_error(["option"], message)])


@router.post("/quotes/options", response_class=HTMLResponse, name="save_quote_options")
def save_options(request: Request, session: SessionDep, catalog: CatalogDep,
                 query: Annotated[str, Form(max_length=20_000)],
                 option: Annotated[list[str], Form()],
                 name: Annotated[str, Form(max_length=200)] = "",
                 customer: Annotated[str, Form(max_length=200)] = "",
                 price: Annotated[str, Form(max_length=40)] = "") -> Response:
    from urllib.parse import parse_qsl

    from app.web.saved_pages import _price  # the page's locale-aware price reading

    picked = list(dict.fromkeys(option))
    if not MIN_OPTIONS <= len(picked) <= MAX_OPTIONS:
        raise _problem(_("Pick two to four options"))
    form = parse_form(dict(parse_qsl(query, keep_blank_values=True)))
    if form.request is None:
        raise _problem("; ".join(f"{k}: {v}" for k, v in form.errors.messages.items()))
    try:
        chosen = [_option(v) for v in picked]
    except ValueError as exc:
        raise _problem(f"unknown option {exc}") from None
    job = form.request
    basis = common_basis(job, [o for _k, o in chosen if o is not None])
    ids = []
    for k, (kind, opt) in enumerate(chosen, start=1):
        try:
            if kind == "own" or kind.startswith("rent:"):
                server = opt.server if opt is not None else None
                req = _tco_request(job.model_copy(update={"hardware": job.hardware.model_copy(update={
                    "server": server})}) if server else job, kind, catalog)
            elif opt is None:
                raise ValueError(kind)
            else:
                req = option_request(job, opt, catalog, basis)
        except (ValueError, ValidationError):
            raise _problem(f"unknown option {kind}") from None
        if kind == "planner" and req.hardware.world_size > 1:
            best = best_plan(req, catalog)
            if best is not None:
                req = adopt_layout(req, best.request)
        label = (kind.removeprefix("rent:").split("@")[0] if kind.startswith("rent:") or opt is None
                 else opt.server or opt.gpu or "")
        try:
            shown = display_names(catalog).get(label, label)
            body = QuoteCreate(name=f"{name or _('Quote')}: {k}/{len(chosen)} {shown}"[:200],
                               customer=customer or "-", inputs=req, price=_price(price) or "0",
                               currency="USD", server_count=req.hardware.num_nodes, chosen_option=label)
            item = SAVERS["quote"](session=session, catalog=catalog, body=body, actor=WEB_ACTOR)
        except (ValidationError, EstimatorError) as exc:
            raise _problem(str(exc).splitlines()[0]) from None
        ids.append(item.id)
    session.commit()
    return RedirectResponse("/quotes/side-by-side?" + "&".join(f"ids={i}" for i in ids), status_code=303)


def _columns(session: Any, catalog: Any, ids: list[int]) -> list[dict[str, Any]]:
    names = display_names(catalog)
    cols = []
    for i in ids:
        item = find_saved(session=session, kind="quote", item_id=i)
        rev = find_revision(item, None)
        q = quote_sections(rev, names, catalog)
        cols.append({"item": item, "rev": rev, "q": q,
                     "rows": {line.label: line.value for part in ("offer", "layout", "memory", "time_and_cost",
                                                                  "power") for line in q[part]}})
    return cols


def _document(request: Request, session: Any, catalog: Any, ids: list[int], lang: str | None) -> HTMLResponse:
    if not MIN_OPTIONS <= len(ids) <= MAX_OPTIONS:
        raise _problem(_("Pick two to four options"))
    with using_locale(lang or current_locale()):
        cols = _columns(session, catalog, ids)
        labels: list[str] = []
        for c in cols:
            for label in c["rows"]:
                if label not in labels:
                    labels.append(label)
        return render(request, "quote_options.html", {"cols": cols, "labels": labels, "covers": _(PRICE_COVERS),
                                                       "ids": ids, "lang": lang or current_locale()})


@router.get("/quotes/side-by-side", response_class=HTMLResponse, name="quote_options_page")
def side_by_side(request: Request, session: SessionDep, catalog: CatalogDep,
                 ids: Annotated[list[int], Query(max_length=MAX_OPTIONS)],
                 lang: Annotated[str | None, Query(pattern="^(en|pt_BR)$")] = None) -> HTMLResponse:
    return _document(request, session, catalog, ids, lang)


@router.get("/quotes/side-by-side.pdf", name="quote_options_pdf")
def side_by_side_pdf(request: Request, session: SessionDep, catalog: CatalogDep,
                     ids: Annotated[list[int], Query(max_length=MAX_OPTIONS)],
                     lang: Annotated[str | None, Query(pattern="^(en|pt_BR)$")] = None) -> Response:
    from weasyprint import HTML

    html = _document(request, session, catalog, ids, lang).body.decode()
    pdf = HTML(string=html, base_url=str(request.base_url)).write_pdf()
    return Response(pdf, media_type="application/pdf",
                    headers={"Content-Disposition": 'attachment; filename="quote-options.pdf"'})
