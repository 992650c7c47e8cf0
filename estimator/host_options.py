"""Defaults and planning options of whole-node sizing (issue #8).

The figures live in ``estimator/data/host_defaults.yaml``, each with its source; :func:`host_defaults` reads
them once. :class:`HostOptions` holds the planning choices a caller may override (how many checkpoints are
kept, how the model is loaded, the rack's power budget, ...); its defaults come from that file.
:class:`HostInput` is the same choices as the request contract's optional ``host`` object (``POST /estimates``,
``POST /plans``): validated, with the defaults shown in the OpenAPI document, turned into options by
:meth:`HostInput.options`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from estimator.errors import InvalidRequestError

__all__ = ["GIB", "HostDefaults", "HostInput", "HostOptions", "ModelLoading", "default_options", "host_defaults",
           "options_for", "resolved_options_for"]

GIB = 1 << 30

ModelLoading = Literal["meta", "rank0", "every-rank"]
CheckpointFormat = Literal["sharded", "full"]
CheckpointTarget = Literal["auto", "local", "shared"]


@dataclass(frozen=True)
class HostDefaults:
    """The figures of ``host_defaults.yaml`` (values only; :attr:`sources` maps ``section.key`` to its source)."""

    values: dict[str, dict[str, Any]]
    sources: dict[str, str]

    def get(self, section: str, key: str) -> Any:
        return self.values[section][key]

    def num(self, section: str, key: str) -> float:
        return float(self.values[section][key])

    def source(self, section: str, key: str) -> str:
        return self.sources[f"{section}.{key}"]


@cache
def host_defaults() -> HostDefaults:
    text = resources.files("estimator").joinpath("data/host_defaults.yaml").read_text()
    raw: dict[str, dict[str, dict[str, Any]]] = yaml.safe_load(text)
    values: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}
    for section, items in raw.items():
        values[section] = {}
        for key, item in items.items():
            if not isinstance(item, dict) or "value" not in item or not item.get("source"):
                raise ValueError(f"host_defaults.yaml: {section}.{key} needs a value and a source")
            values[section][key] = item["value"]
            sources[f"{section}.{key}"] = " ".join(str(item["source"]).split())
    return HostDefaults(values, sources)


@dataclass(frozen=True)
class HostOptions:
    """Planning choices of whole-node sizing. ``None`` fields take their default from ``host_defaults.yaml``
    (or, for ``nccl``, from the layout: on when the job has more than one GPU)."""

    checkpoints_kept: int | None = None
    checkpoint_interval_s: float | None = None
    checkpoint_max_time_share: float | None = None
    async_checkpoint: bool | None = None
    checkpoint_format: CheckpointFormat = "sharded"
    checkpoint_target: CheckpointTarget = "auto"
    model_loading: ModelLoading = "rank0"
    dataloader_workers: int | None = None
    dataset_bytes: int | None = None
    dataset_on_local_nvme: bool = True
    include_os_reserved: bool = True
    nccl: bool | None = None
    rack_kw_budget: float | None = None
    comm_budget_fraction: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = (
            (self.checkpoints_kept is None or self.checkpoints_kept >= 1, "checkpoints_kept must be >= 1"),
            (self.checkpoint_interval_s is None or self.checkpoint_interval_s > 0, "checkpoint_interval_s > 0"),
            (self.checkpoint_max_time_share is None or 0 < self.checkpoint_max_time_share < 1,
             "checkpoint_max_time_share must be in (0, 1)"),
            (self.dataloader_workers is None or self.dataloader_workers >= 0, "dataloader_workers must be >= 0"),
            (self.dataset_bytes is None or self.dataset_bytes >= 0, "dataset_bytes must be >= 0"),
            (self.rack_kw_budget is None or self.rack_kw_budget > 0, "rack_kw_budget must be > 0"),
            (self.comm_budget_fraction is None or 0 < self.comm_budget_fraction <= 1,
             "comm_budget_fraction must be in (0, 1]"),
        )
        for ok, message in checks:
            if not ok:
                raise InvalidRequestError(message, "host_options")

    def resolved(self) -> HostOptions:
        """A copy with every ``None`` default (except ``nccl``) filled from ``host_defaults.yaml``; the options
        themselves when every one is filled already (the copy would hold the same values: the node sizing asks
        again for options it was given resolved, and ``dataclasses.replace`` runs interpreted)."""
        if (self.checkpoints_kept and self.checkpoint_interval_s and self.checkpoint_max_time_share
                and self.async_checkpoint is not None and self.dataloader_workers is not None and self.rack_kw_budget
                and self.comm_budget_fraction):
            return self
        d = host_defaults()
        return replace(
            self,
            checkpoints_kept=self.checkpoints_kept or int(d.num("checkpoint", "keep")),
            checkpoint_interval_s=self.checkpoint_interval_s or d.num("checkpoint", "interval_s"),
            checkpoint_max_time_share=self.checkpoint_max_time_share or d.num("checkpoint", "max_time_share"),
            async_checkpoint=(bool(d.get("checkpoint", "async_staging")) if self.async_checkpoint is None
                              else self.async_checkpoint),
            dataloader_workers=(int(d.num("ram", "dataloader_workers_per_process")) if self.dataloader_workers is None
                                else self.dataloader_workers),
            rack_kw_budget=self.rack_kw_budget or default_rack_kw(),
            comm_budget_fraction=self.comm_budget_fraction or d.num("network", "comm_budget_fraction"),
        )


def default_rack_kw() -> float:
    """The default rack budget: :func:`estimator.facility.rack.default_rack_kw` (the catalog's one ``rack_kw``;
    imported here at call time, since the rack module reads this one's defaults)."""
    from estimator.facility.rack import default_rack_kw as rack_default

    return rack_default()


def default_options() -> HostOptions:
    return HostOptions().resolved()


def _default(section: str, key: str) -> Any:
    return host_defaults().get(section, key)


class HostInput(BaseModel):
    """The request's ``host`` object: whole-node sizing choices (defaults from ``host_defaults.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    checkpoints_kept: int = Field(default=int(_default("checkpoint", "keep")), ge=1, le=1000,
                                  description="checkpoints kept on local NVMe (when checkpoints go there)")
    checkpoint_interval_s: float = Field(default=float(_default("checkpoint", "interval_s")), ge=60, le=30 * 86400,
                                         description="seconds of training between checkpoints")
    checkpoint_max_time_share: float = Field(default=float(_default("checkpoint", "max_time_share")), ge=0.001, le=0.5,
                                             description="share of training time a blocking checkpoint may take")
    async_checkpoint: bool = Field(default=bool(_default("checkpoint", "async_staging")),
                                   description="asynchronous DCP save: a pinned host copy of each rank's shard")
    checkpoint_target: CheckpointTarget = Field(default="auto",
                                                description="auto: local NVMe on one node, shared storage on more")
    model_loading: ModelLoading = Field(default="rank0", description="meta: every rank materialises its shard; "
                                        "rank0: rank 0 loads and broadcasts; every-rank: from_pretrained per rank")
    dataloader_workers: int = Field(default=int(_default("ram", "dataloader_workers_per_process")), ge=0, le=128,
                                    description="DataLoader workers per training process")
    dataset_bytes: int | None = Field(default=None, ge=0, le=10**18, description="pre-tokenised dataset size (default: "
                                      "training.train_tokens x 2 or 4 bytes per token)")
    rack_kw_budget: float = Field(default_factory=lambda: default_rack_kw(), ge=1, le=1000,
                                  description="power budget of one rack, for nodes per rack (default: the TCO "
                                  "assumptions' rack_kw, 40.8 kW)",
                                  json_schema_extra=lambda schema: schema.update(default=default_rack_kw()))

    def options(self) -> HostOptions:
        return HostOptions(checkpoints_kept=self.checkpoints_kept, checkpoint_interval_s=self.checkpoint_interval_s,
                           checkpoint_max_time_share=self.checkpoint_max_time_share,
                           async_checkpoint=self.async_checkpoint, checkpoint_target=self.checkpoint_target,
                           model_loading=self.model_loading, dataloader_workers=self.dataloader_workers,
                           dataset_bytes=self.dataset_bytes, rack_kw_budget=self.rack_kw_budget)


def options_for(req: Any) -> HostOptions:
    """The request's ``host`` choices as options (the defaults when it has none)."""
    host = getattr(req, "host", None)
    return host.options() if isinstance(host, HostInput) else HostOptions()


@lru_cache(maxsize=1024)
def _resolved_for(host: HostInput | None) -> HostOptions:
    return (host.options() if host is not None else HostOptions()).resolved()


def resolved_options_for(req: Any) -> HostOptions:
    """``options_for(req).resolved()``, memoised on the request's (frozen) ``host`` input: every estimate asks.
    The options are frozen; their ``extra`` dict is empty and nothing writes to it."""
    host = getattr(req, "host", None)
    if not isinstance(host, HostInput):
        host = None
    return _resolved_for(host)
