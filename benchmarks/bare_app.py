"""The floor for :mod:`benchmarks.api_speed`: a bare FastAPI app whose ``POST /api/v1/estimates`` reads the body
and answers the bytes in the file ``CAPPLAN_BARE_BODY`` (the real app's answer); ``GET /readyz`` says ok."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI, Request, Response


def create_app() -> FastAPI:
    body = Path(os.environ["CAPPLAN_BARE_BODY"]).read_bytes()
    app = FastAPI()

    @app.post("/api/v1/estimates")
    async def estimates(request: Request) -> Response:
        await request.body()
        return Response(content=body, media_type="application/json")

    @app.get("/readyz")
    async def readyz() -> Response:
        return Response(content=b'{"status":"ok"}', media_type="application/json")

    return app
