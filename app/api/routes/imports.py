"""``POST /api/v1/imports``: read training configs a team already has (axolotl, LLaMA-Factory, HF / TRL trainer
arguments, torchtune, DeepSpeed, accelerate, torchtitan, Megatron-LM / NeMo) into an estimate request and a reading
report (:mod:`app.imports`). A file that cannot be read is a 422 naming the file and the key."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from app.errors import ApiError, field_error
from app.imports import MAX_FILES, ImportProblem, SourceFile, import_files
from app.schemas.imports import ImportFile, ImportResponse
from app.schemas.problem import problem_responses

router = APIRouter(prefix="/imports", tags=["imports"])


class UnreadableConfig(ApiError):
    status, slug, title = 422, "unreadable-config", "Unreadable config"


@router.post("", responses=problem_responses(422), summary="Read existing training configs into an estimate request")
def create_import(
    files: Annotated[list[ImportFile], Body(min_length=1, max_length=MAX_FILES, description="the files of one "
                                            "run, e.g. a trainer YAML and the DeepSpeed JSON it names")],
) -> ImportResponse:
    """Formats are detected from the content unless `format` is given. The report lists every key read and the
    field it set, each key that changes memory or time but has no request field (with the field it will map to),
    the defaults filled and what is missing (`needs`)."""
    try:
        result = import_files([SourceFile(f.name, f.content, f.format) for f in files])
    except ImportProblem as exc:
        index = next((i for i, f in enumerate(files) if f.name == exc.file), None)
        path: list[str | int] = ["files", index, "content"] if index is not None else ["files"]
        if exc.key:
            path.append(exc.key)
        raise UnreadableConfig(str(exc), [field_error(path, str(exc), "unreadable-config")]) from None
    data = result.as_dict()
    return ImportResponse(request=result.request, request_set=data["request"], report=data["report"])
