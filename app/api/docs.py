"""Swagger UI and ReDoc served from vendored files in ``static/vendor`` (no CDN); see scripts/vendor-docs-assets."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

from app.core.security_headers import csp_nonce

__all__ = ["OPENAPI_URL", "router"]

OPENAPI_URL = "/api/v1/openapi.json"
SWAGGER_UI = "/static/vendor/swagger-ui-5.35.0"
REDOC = "/static/vendor/redoc-2.5.4"

router = APIRouter(include_in_schema=False)


def _with_nonce(page: HTMLResponse, request: Request) -> HTMLResponse:
    """The page with this response's CSP nonce on its inline ``<script>`` (Swagger UI's set-up call); the
    vendored scripts load from this origin."""
    body = bytes(page.body).decode().replace("<script>", f'<script nonce="{csp_nonce(request)}">')
    return HTMLResponse(body, status_code=page.status_code)


@router.get("/api/v1/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    return _with_nonce(get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title="capplan API",
        swagger_js_url=f"{SWAGGER_UI}/swagger-ui-bundle.js",
        swagger_css_url=f"{SWAGGER_UI}/swagger-ui.css",
        swagger_favicon_url=f"{SWAGGER_UI}/favicon-32x32.png",
        swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True},
    ), request)


@router.get("/api/v1/redoc")
def redoc(request: Request) -> HTMLResponse:
    return _with_nonce(get_redoc_html(
        openapi_url=OPENAPI_URL,
        title="capplan API",
        redoc_js_url=f"{REDOC}/redoc.standalone.js",
        redoc_favicon_url=f"{SWAGGER_UI}/favicon-32x32.png",
        with_google_fonts=False,
    ), request)
