"""``POST /import`` (issue 30): a pasted or uploaded training config (axolotl, LLaMA-Factory, trainer arguments,
torchtune, DeepSpeed, accelerate, torchtitan, Megatron) fills the home page's form, runs the estimate and shows the
reading report (app.imports). A plain same-origin form post (app.web.guard), so it works without JavaScript."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import HTMLResponse
from starlette.datastructures import QueryParams

from app.core.i18n import gettext as _
from app.deps import CatalogDep
from app.imports import MAX_FILES, ImportProblem, SourceFile, import_files
from app.imports.safe import MAX_BYTES
from app.web.estimate_page import form_context, run_form
from app.web.forms import FormErrors, parse_form, request_to_query
from app.web.templating import render

__all__ = ["router"]

router = APIRouter()


async def _sources(config: str, uploads: list[UploadFile]) -> list[SourceFile]:
    files = [SourceFile("pasted config", config)] if config.strip() else []
    for upload in uploads:
        if not upload.filename:
            continue
        data = await upload.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ImportProblem(upload.filename, "", _("is over the 1 MiB limit for a config file"))
        try:
            files.append(SourceFile(upload.filename, data.decode("utf-8")))
        except UnicodeDecodeError:
            raise ImportProblem(upload.filename, "", _("is not UTF-8 text")) from None
    if not files:
        raise ImportProblem(_("config"), "", _("paste a config or choose a file"))
    if len(files) > MAX_FILES:
        raise ImportProblem(_("config"), "", _("at most %(n)s files") % {"n": MAX_FILES})
    return files


@router.post("/import", response_class=HTMLResponse, name="import_config")
async def import_config(
    request: Request,
    catalog: CatalogDep,
    config: Annotated[str, Form(max_length=MAX_BYTES)] = "",
    files: Annotated[list[UploadFile] | None, File()] = None,
) -> HTMLResponse:
    try:
        result = import_files(await _sources(config, files or []))
    except ImportProblem as exc:
        form = parse_form({})
        context = {**form_context(catalog, form.values, FormErrors()), "result": None, "charts": True,
                   "active": "home", "import_error": str(exc), "import_text": config}
        return render(request, "estimate.html", context, status_code=422)
    query = request_to_query(result.request)
    context, _errors = run_form(catalog, QueryParams(parse_qsl(query, keep_blank_values=True)))
    context.update(charts=True, active="home", import_report=result.report.as_dict(), import_text=config,
                   import_query=query)
    return render(request, "estimate.html", context)
