"""The OpenAPI document: stable operation ids, the problem schema and the estimator contract in components."""

from __future__ import annotations

import re
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter

from app.schemas.problem import Problem, problem_responses
from estimator import EstimateRequest, EstimateResponse
from estimator.inference import InferenceRequest, InferenceResponse
from hardware_catalog import CloudOffer, Gpu, Server

__all__ = ["allowed_methods", "install_openapi", "operation_id"]

_REF = "#/components/schemas/{model}"
_EXTRA_MODELS: tuple[type[BaseModel], ...] = (Problem, EstimateRequest, EstimateResponse, Gpu, Server, CloudOffer,
                                               InferenceRequest, InferenceResponse)


def operation_id(route: APIRoute) -> str:
    """``<tag>-<function name>``, e.g. ``quotes-create_quote``: stable across releases for generated clients."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def _add_components(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in _EXTRA_MODELS:
        mode: Literal["validation", "serialization"] = (
            "serialization" if model is EstimateResponse else "validation"
        )
        model_schema = TypeAdapter(model).json_schema(ref_template=_REF, mode=mode)
        for name, definition in model_schema.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components.setdefault(model.__name__, model_schema)


def _problem_422s(schema: dict[str, Any]) -> None:
    """FastAPI documents 422 as its own ``HTTPValidationError``; ours are problem+json, so say that."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            if "422" in operation.get("responses", {}):
                operation["responses"]["422"] = problem_responses(422)[422]
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)


def install_openapi(app: FastAPI, description: str) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=description, routes=app.routes)
            _add_components(schema)
            _problem_422s(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _path_regex(template: str, operations: dict[str, Any]) -> re.Pattern[str]:
    integers = {
        p["name"] for op in operations.values() for p in op.get("parameters", [])
        if p.get("in") == "path" and p.get("schema", {}).get("type") == "integer"
    }
    parts = re.split(r"\{(\w+)\}", template)
    regex = "".join(
        re.escape(part) if i % 2 == 0 else ("[0-9]+" if part in integers else "[^/]+")
        for i, part in enumerate(parts)
    )
    return re.compile(f"^{regex}$")


def _method_table(app: FastAPI) -> list[tuple[re.Pattern[str], list[str]]]:
    table: list[tuple[re.Pattern[str], list[str]]] | None = getattr(app.state, "allow_table", None)
    if table is None:
        paths = app.openapi().get("paths", {})
        table = [(_path_regex(t, ops), sorted(m.upper() for m in ops)) for t, ops in paths.items()]
        app.state.allow_table = table
    return table


def allowed_methods(app: FastAPI, path: str) -> list[str] | None:
    """The methods the schema documents for ``path`` (for a 405's ``Allow``), or ``None`` if it has none."""
    for regex, methods in _method_table(app):
        if regex.match(path):
            return methods
    return None
