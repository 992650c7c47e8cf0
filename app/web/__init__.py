"""HTML pages (Jinja2 + HTMX) for capplan."""

from app.web.routes import router

__all__ = ["router"]
