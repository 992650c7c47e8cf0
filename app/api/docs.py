"""Swagger UI and ReDoc served from vendored files in ``static/vendor`` (no CDN); see scripts/vendor-docs-assets."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

__all__ = ["OPENAPI_URL", "router"]

OPENAPI_URL = "/api/v1/openapi.json"
SWAGGER_UI = "/static/vendor/swagger-ui-5.35.0"
REDOC = "/static/vendor/redoc-2.5.4"

router = APIRouter(include_in_schema=False)


@router.get("/api/v1/docs")
def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title="capplan API",
        swagger_js_url=f"{SWAGGER_UI}/swagger-ui-bundle.js",
        swagger_css_url=f"{SWAGGER_UI}/swagger-ui.css",
        swagger_favicon_url=f"{SWAGGER_UI}/favicon-32x32.png",
        swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True},
    )


@router.get("/api/v1/redoc")
def redoc() -> HTMLResponse:
    return get_redoc_html(
        openapi_url=OPENAPI_URL,
        title="capplan API",
        redoc_js_url=f"{REDOC}/redoc.standalone.js",
        redoc_favicon_url=f"{SWAGGER_UI}/favicon-32x32.png",
        with_google_fonts=False,
    )
