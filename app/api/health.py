"""Liveness, readiness and metrics; outside ``/api/v1``, the schema and the rate limits."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from app.deps import SessionDep

router = APIRouter(include_in_schema=False)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(session: SessionDep) -> Response:
    """The database answers."""
    try:
        session.execute(text("SELECT 1"))
    except Exception as exc:  # any driver error means "not ready"
        return JSONResponse({"status": "unavailable", "detail": type(exc).__name__}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/metrics")
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
