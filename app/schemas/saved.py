"""Quotes and saved plans: what is posted and what comes back."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from app.models import SavedItem, SavedRevision
from estimator import EstimateRequest
from estimator.inference import InferenceRequest

__all__ = [
    "Change",
    "PlanCreate",
    "QuoteCreate",
    "RecomputeOut",
    "RevisionOut",
    "RevisionSummary",
    "SavedList",
    "SavedOut",
    "SavedSummary",
]

Name = Field(min_length=1, max_length=200)

#: money is kept exact (Decimal, 2 places) and written to JSON as a number
Money = Annotated[Decimal, PlainSerializer(float, return_type=float, when_used="json")]


class QuoteCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Name
    customer: str = Name
    inputs: EstimateRequest = Field(description="the estimate request the quote is for")
    chosen_option: str | None = Field(default=None, max_length=200, description="e.g. a server or offer id")
    server_count: int = Field(default=1, ge=1, le=100_000)
    price: Money = Field(ge=0, le=Decimal("1e12"), max_digits=16, decimal_places=2,
                           description="the quoted price, in `currency`")
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    notes: str | None = Field(default=None, max_length=2000)
    serving: InferenceRequest | None = Field(
        default=None, description="an optional serving line: the inference request (as POST "
        "/api/v1/inference-estimates takes it) for serving the model after training; the quote stores it with its "
        "result ($ per million tokens, tokens/s, yearly capacity) and re-computes both on recompute")


class PlanCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Name
    inputs: EstimateRequest
    notes: str | None = Field(default=None, max_length=2000)


class Change(BaseModel):
    path: str = Field(description="dotted path into the result, e.g. memory.total_bytes")
    before: Any = None
    after: Any = None


class RevisionSummary(BaseModel):
    number: int
    reason: Literal["created", "recomputed"]
    created_at: datetime
    created_by: str
    estimator_version: str
    catalog_version: str
    changes: int | None = Field(description="how many values changed from the previous revision")


class RevisionOut(RevisionSummary):
    input_kind: str
    inputs: dict[str, Any]
    chosen_option: str | None
    server_count: int | None
    price: Money | None
    currency: str | None
    notes: str | None
    result: dict[str, Any] = Field(description="the full estimate response, as computed then")
    serving_inputs: dict[str, Any] | None = Field(
        default=None, description="the serving line's inference request (null: the quote has no serving line)")
    serving_result: dict[str, Any] | None = Field(
        default=None, description="the serving line's inference response, as computed then")
    diff: list[Change] | None = Field(description="what changed from the previous revision (serving line changes "
                                      "under serving.*)")

    @classmethod
    def of(cls, rev: SavedRevision) -> RevisionOut:
        return cls(**_summary_fields(rev), input_kind=rev.input_kind, inputs=rev.inputs,
                   chosen_option=rev.chosen_option, server_count=rev.server_count, price=rev.price,
                   currency=rev.currency, notes=rev.notes, result=rev.result,
                   serving_inputs=rev.serving_inputs, serving_result=rev.serving_result,
                   diff=[Change(**c) for c in rev.diff] if rev.diff is not None else None)


def _summary_fields(rev: SavedRevision) -> dict[str, Any]:
    return {"number": rev.number, "reason": rev.reason, "created_at": rev.created_at,
            "created_by": rev.created_by, "estimator_version": rev.estimator_version,
            "catalog_version": rev.catalog_version, "changes": len(rev.diff) if rev.diff is not None else None}


class SavedSummary(BaseModel):
    id: int
    kind: Literal["quote", "plan"]
    name: str
    customer: str | None
    latest_revision: int
    created_at: datetime
    created_by: str

    @classmethod
    def of(cls, item: SavedItem) -> SavedSummary:
        return cls(id=item.id, kind=item.kind, name=item.name, customer=item.customer,
                   latest_revision=item.latest_revision, created_at=item.created_at, created_by=item.created_by)


class SavedOut(SavedSummary):
    revision: RevisionOut = Field(description="the latest revision (or the one asked for)")
    revisions: list[RevisionSummary] = Field(description="every revision, oldest first")

    @classmethod
    def with_revision(cls, item: SavedItem, rev: SavedRevision) -> SavedOut:
        return cls(**SavedSummary.of(item).model_dump(), revision=RevisionOut.of(rev),
                   revisions=[RevisionSummary(**_summary_fields(r)) for r in item.revisions])


class SavedList(BaseModel):
    items: list[SavedSummary]
    total: int
    limit: int
    offset: int


class RecomputeOut(BaseModel):
    saved: SavedOut = Field(description="the quote or plan with its new revision")
    previous_revision: int
    new_revision: int | None = Field(description="null for a dry run, which stores nothing")
    changed: bool
    diff: list[Change]
