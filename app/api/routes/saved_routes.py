"""The routes quotes and saved plans share: list, get, recompute, delete and exports.

Both are ``saved_items`` rows of a different ``kind``. Deleting is a soft delete: the item disappears from
every read (404 afterwards) but its revisions stay in the database for the audit trail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel

from app.deps import CatalogDep, MetricsDep, SessionDep, WriterDep
from app.exports.documents import csv_document, json_document, pdf_document, print_document
from app.repositories.saved import MAX_OFFSET, list_items, soft_delete
from app.schemas.problem import problem_responses
from app.schemas.saved import RecomputeOut, SavedList, SavedOut, SavedSummary
from app.services import saved as service
from app.services.saved import SAVERS, find_revision, find_saved

__all__ = ["ItemId", "RevisionQuery", "add_create_route", "add_export_routes", "add_saved_routes"]

ItemId = Annotated[int, Path(ge=1, le=2**31 - 1)]
RevisionQuery = Annotated[int | None, Query(ge=1, le=2**31 - 1, description="a revision number; default latest")]
LangQuery = Annotated[Literal["en", "pt_BR"] | None, Query(description="the customer document's language "
                                                                      "(words, numbers, money, dates); default en")]


def _handlers(kind: str) -> dict[str, Callable[..., Any]]:
    def list_saved(
        session: SessionDep,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
        customer: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        name: Annotated[str | None, Query(min_length=1, max_length=200, description="substring")] = None,
    ) -> SavedList:
        items, total = list_items(session=session, kind=kind, customer=customer, name=name, limit=limit,
                                  offset=offset)
        return SavedList(items=[SavedSummary.of(i) for i in items], total=total, limit=limit, offset=offset)

    def get_saved(item_id: ItemId, session: SessionDep, revision: RevisionQuery = None) -> SavedOut:
        item = find_saved(session=session, kind=kind, item_id=item_id)
        return SavedOut.with_revision(item, find_revision(item, revision))

    def recompute_saved(
        item_id: ItemId, session: SessionDep, catalog: CatalogDep, writer: WriterDep,
        dry_run: Annotated[bool, Query(description="compute and diff, but store nothing")] = False,
    ) -> RecomputeOut:
        done = service.recompute_saved(session=session, catalog=catalog, kind=kind, item_id=item_id,
                                       actor=writer.name, store=not dry_run)
        shown = done.new or done.previous
        return RecomputeOut(saved=SavedOut.with_revision(done.item, shown), previous_revision=done.previous.number,
                            new_revision=done.new.number if done.new else None, changed=bool(done.diff),
                            diff=done.diff)

    def delete_saved(item_id: ItemId, session: SessionDep, writer: WriterDep) -> Response:
        soft_delete(item=find_saved(session=session, kind=kind, item_id=item_id), actor=writer.name)
        session.commit()
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    return {"list": list_saved, "get": get_saved, "recompute": recompute_saved, "delete": delete_saved}


def add_create_route(router: APIRouter, kind: str, one: str, body_model: type[BaseModel]) -> None:
    """``POST ""``: save a quote or a plan (computes and stores the full result as revision 1)."""

    def create_saved(
        body: Any, session: SessionDep, catalog: CatalogDep, writer: WriterDep, metrics: MetricsDep
    ) -> SavedOut:
        item = SAVERS[kind](session=session, catalog=catalog, body=body, actor=writer.name)
        session.commit()
        metrics.saved.labels(kind).inc()
        return SavedOut.with_revision(item, item.revisions[-1])

    create_saved.__annotations__["body"] = body_model  # the request model of this kind, for FastAPI and OpenAPI
    router.add_api_route("", create_saved, methods=["POST"], status_code=status.HTTP_201_CREATED,
                         response_model=SavedOut, name=f"create_{one}", responses=problem_responses(422),
                         summary=f"Save a {kind} (computes and stores the full result)")


def add_saved_routes(router: APIRouter, kind: str, one: str, many: str) -> None:
    h = _handlers(kind)
    router.add_api_route("", h["list"], methods=["GET"], response_model=SavedList, name=f"list_{many}",
                         summary=f"List {many.replace('_', ' ')}, newest first (paged, filtered)")
    router.add_api_route("/{item_id:int}", h["get"], methods=["GET"], response_model=SavedOut, name=f"get_{one}",
                         responses=problem_responses(404), summary=f"One {one.replace('_', ' ')}")
    router.add_api_route("/{item_id:int}/recompute", h["recompute"], methods=["POST"], response_model=RecomputeOut,
                         name=f"recompute_{one}", responses=problem_responses(404, 409),
                         summary="Re-run on the current estimator and catalog; stores a new revision and the diff")
    router.add_api_route("/{item_id:int}", h["delete"], methods=["DELETE"], status_code=204,
                         response_class=Response, name=f"delete_{one}", responses=problem_responses(404),
                         summary="Soft delete: hidden from reads, revisions kept for the audit trail")


def add_export_routes(router: APIRouter, kind: str, one: str) -> None:
    """``/{id}.json``, ``/{id}.csv`` and ``/{id}/print`` (the ``:int`` convertor keeps ``/{id}`` from taking
    ``1.json``)."""

    def export_json(item_id: ItemId, session: SessionDep) -> JSONResponse:
        item = find_saved(session=session, kind=kind, item_id=item_id)
        return JSONResponse(json_document(item),
                            headers={"Content-Disposition": f'attachment; filename="{kind}-{item_id}.json"'})

    def export_csv(item_id: ItemId, session: SessionDep, revision: RevisionQuery = None) -> Response:
        item = find_saved(session=session, kind=kind, item_id=item_id)
        rev = find_revision(item, revision)
        return Response(csv_document(item, rev), media_type="text/csv; charset=utf-8", headers={
            "Content-Disposition": f'attachment; filename="{kind}-{item_id}-r{rev.number}.csv"'})

    def print_saved(item_id: ItemId, session: SessionDep, catalog: CatalogDep,
                    revision: RevisionQuery = None, lang: LangQuery = None) -> HTMLResponse:
        item = find_saved(session=session, kind=kind, item_id=item_id)
        return HTMLResponse(print_document(item, find_revision(item, revision), catalog, lang))

    def export_pdf(item_id: ItemId, session: SessionDep, catalog: CatalogDep,
                   revision: RevisionQuery = None, lang: LangQuery = None) -> Response:
        item = find_saved(session=session, kind=kind, item_id=item_id)
        rev = find_revision(item, revision)
        return Response(pdf_document(item, rev, catalog, lang), media_type="application/pdf", headers={
            "Content-Disposition": f'attachment; filename="{kind}-{item_id}-r{rev.number}.pdf"'})

    text = {"content": {"text/csv": {"schema": {"type": "string"}}}}
    html = {"content": {"text/html": {"schema": {"type": "string"}}}}
    router.add_api_route("/{item_id:int}.json", export_json, methods=["GET"], name=f"export_{one}_json",
                         response_class=JSONResponse, responses=problem_responses(404),
                         summary="Export with every revision, as a JSON document")
    router.add_api_route("/{item_id:int}.csv", export_csv, methods=["GET"], name=f"export_{one}_csv",
                         response_class=Response, responses={200: text, **problem_responses(404)},
                         summary="Export one revision as field,value CSV")
    router.add_api_route("/{item_id:int}/print", print_saved, methods=["GET"], name=f"print_{one}",
                         response_class=HTMLResponse, responses={200: html, **problem_responses(404)},
                         summary="Printable HTML: the customer-ready quote, display names only")
    pdf = {"content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}}}
    router.add_api_route("/{item_id:int}.pdf", export_pdf, methods=["GET"], name=f"export_{one}_pdf",
                         response_class=Response, responses={200: pdf, **problem_responses(404)},
                         summary="The customer-ready quote as a PDF (WeasyPrint)")
