"""``POST /api/v1/imports``: the files of one training run in, the estimate request and the reading report out."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from estimator import EstimateRequest

__all__ = ["ImportFile", "ImportResponse"]

ImportFormat = Literal["axolotl", "llama-factory", "trainer", "torchtune", "deepspeed", "accelerate", "torchtitan",
                       "megatron", "hf-config"]


class ImportFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=300, description="the file's name (reports and cross-file references "
                      "such as `deepspeed: ds_config.json` use it)")
    content: str = Field(max_length=1 << 20, description="the file's text (at most 1 MiB)")
    format: ImportFormat | None = Field(default=None, description="null: detected from the content")


class ImportResponse(BaseModel):
    request: EstimateRequest = Field(description="the estimate request read from the files (POST it to /estimates)")
    request_set: dict[str, Any] = Field(description="only the fields the files set or the importer filled (the "
                                        "rest are the request's defaults)")
    report: dict[str, Any] = Field(description="files (name, format); read (file, key, value, field, set, note); "
                                   "not_represented (file, key, value, effect, maps_to: the request field it will "
                                   "map to); defaults (field, value, why); no_effect and unrecognized (file, key); "
                                   "needs (what the files lack, e.g. a model's config.json)")
