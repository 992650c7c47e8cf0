"""A form that starts right: the chosen server's GPU shown in the GPU field, a pasted ``config.json`` named in
the model field (``_name_or_path``, else ``name``, else its first ``architectures`` entry, else its
``model_type``). The same rules run in the browser (``static/js/app.js``) as the user types."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from app.web.backend import Option
from estimator.request import DEFAULT_GPU

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["PASTED_PREFIX", "model_field", "pasted_name", "server_gpu"]

PASTED_PREFIX = "Pasted config.json: "


def pasted_name(text: str | None) -> str | None:
    """The model name a pasted ``config.json`` gives itself, or ``None`` (empty, not JSON, no name at all)."""
    if not text or not text.strip():
        return None
    try:
        cfg = json.loads(text)
    except ValueError:
        return None
    if not isinstance(cfg, dict):
        return None
    archs = cfg.get("architectures")
    for value in (cfg.get("_name_or_path"), cfg.get("name"),
                  archs[0] if isinstance(archs, list) and archs else None, cfg.get("model_type")):
        if isinstance(value, str) and value.strip():
            return value.strip()[:200]
    return "unnamed model"


def model_field(models: list[Option], values: dict[str, Any]) -> tuple[list[Option], dict[str, Any]]:
    """The model select's options and values: with a pasted config, a first option naming it, selected."""
    name = pasted_name(values.get("model_json"))
    if name is None:
        return models, values
    return [Option("", PASTED_PREFIX + name), *models], {**values, "model": ""}


def server_gpu(catalog: Catalog, values: dict[str, Any]) -> dict[str, Any]:
    """With a catalog server chosen and the GPU left at its default, show the server's GPU (the estimate uses
    it: ``estimator.estimate`` takes the server's GPU when the request names the default one)."""
    server = catalog.servers.get(values.get("hardware.server") or "")
    if server is None or values.get("hardware.gpu") not in (None, "", DEFAULT_GPU):
        return values
    return {**values, "hardware.gpu": server.gpu_id}
