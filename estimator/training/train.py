"""Time to train a token budget, GPU-hours, energy, checkpoint size and write time, dataloader bandwidth.

- Steps: ``ceil(train_tokens / tokens per step)``, tokens per step = micro-batch x sequence x accumulation x dp.
  Time to train = ``train_tokens / tokens per step`` x step time: the token budget at the step's throughput
  (fractional steps, so a step larger than the budget does not bill a whole step; :func:`train_warnings` says
  so), with no restarts, evaluation or checkpoint stalls.
- GPU-hours: world size x time to train.
- Energy (IT energy at the servers, no PUE; multiply by the site's PUE, e.g. 1.1-1.6 in
  ``hardware_catalog`` TCO defaults): each node draws ``average_draw_fraction`` (0.75) of its peak, the peak
  being the catalog server's ``max_power_kw`` (less the TDP of empty GPU slots) or, without a server,
  ``server_watts_per_gpu_tdp`` (1.82, DGX H100: 10.2 kW for 8 x 700 W) x GPUs x TDP
  (``estimator/data/host_defaults.yaml``, from epoch-research/training-cost-trends ``energy.py``).
- Checkpoint: the bytes of one checkpoint (weights + optimizer states by framework and layout,
  :func:`estimator.training.checkpoint.checkpoint_size`, DCP format) and the time for the busiest node to write
  its share to the target :func:`estimator.training.checkpoint.checkpoint_target` picks, as the host sizing does:
  local NVMe on one node (the server's data drives, ``nvme_bays``, else 2, at the catalog's per-drive write
  rate for its PCIe generation), shared storage across nodes (the catalog's parallel-fs/NFS per-node write
  rate, else ``host_defaults.yaml`` ``storage.shared_fs_write_gbps_per_node``). In a full estimate the host
  sizing's figure (its recommended NVMe set) replaces it: :func:`with_host_checkpoint`.
- Dataloader: tokens/s x bytes per stored token (Megatron ``indexed_dataset.py``: uint16 below 65,500 tokens of
  vocabulary, int32 above).
"""

from __future__ import annotations

import math
from typing import Any, Final

from estimator.construct import trusted
from estimator.host_options import host_defaults
from estimator.job import Job
from estimator.messages import Num, Text
from estimator.model.spec import ModelShape
from estimator.response import TimeResult, TrainResult
from estimator.training.checkpoint import checkpoint_size, checkpoint_target
from estimator.training.layout import Layout
from hardware_catalog import Catalog, Gpu, Server

__all__ = ["TrainFigures", "node_power_w", "train_figures", "train_result", "train_warnings", "with_host_checkpoint"]

DEFAULT_DATA_DRIVES: Final = 2
NVME_WRITE_GBPS: Final = {4: 5.1, 5: 6.6}  # fallback per-drive writes (catalog nvme-gen4-x4 / nvme-gen5-x4)


def _field(obj: Any, name: str, default: Any = None) -> Any:
    return getattr(obj, name, default) if obj is not None else default


def node_power_w(layout: Layout, gpu: Gpu, server: Server | None) -> float:
    """Average watts of one node during training (see the module docstring)."""
    d = host_defaults()
    tdp = float(_field(gpu, "tdp_w", 700.0) or 700.0)
    gpus = layout.gpus_per_node
    max_kw = _field(server, "max_power_kw")
    if max_kw:
        slots = int(_field(server, "gpu_count", gpus) or gpus)
        peak = float(max_kw) * 1000.0 - max(0, slots - gpus) * tdp
    else:
        peak = gpus * tdp * d.num("power", "server_watts_per_gpu_tdp")
    return peak * d.num("power", "average_draw_fraction")


def _drive_write_bps(server: Server | None, catalog: Catalog) -> float:
    gen = int(_field(server, "pcie_gen", 5) or 5)
    best: tuple[int, float] | None = None
    for s in (_field(catalog, "storage", {}) or {}).values():
        if _field(s, "kind") == "local-nvme" and _field(s, "scope") == "per-drive" and _field(s, "write_gbps"):
            dist = abs(int(_field(s, "pcie_gen", gen) or gen) - gen)
            if best is None or dist < best[0]:
                best = (dist, float(_field(s, "write_gbps")))
    gbps = best[1] if best else NVME_WRITE_GBPS.get(gen, NVME_WRITE_GBPS[4])
    return gbps * 1e9


def _shared_write_bps(catalog: Catalog) -> float:
    """Per-node write rate to shared storage: the catalog's first parallel-fs/NFS per-node class (as
    ``estimator.host.sizing`` reads it), else the host defaults."""
    for s in (_field(catalog, "storage", {}) or {}).values():
        if _field(s, "kind") in ("parallel-fs", "nfs") and _field(s, "scope") == "per-node" \
                and _field(s, "write_gbps"):
            return float(_field(s, "write_gbps")) * 1e9
    return host_defaults().num("storage", "shared_fs_write_gbps_per_node") * 1e9


def _checkpoint(job: Job, shape: ModelShape, layout: Layout, server: Server | None,
                catalog: Catalog) -> tuple[int, float]:
    size = checkpoint_size(job, shape, layout)
    requested = str(getattr(job.request.host, "checkpoint_target", None) or "auto")
    if checkpoint_target(layout.num_nodes, requested) == "shared":
        write = _shared_write_bps(catalog)
    else:
        drives = int(_field(server, "nvme_bays", 0) or DEFAULT_DATA_DRIVES)
        write = max(1, drives) * _drive_write_bps(server, catalog)
    return size.total_bytes, size.per_node_bytes / write


def _bytes_per_token(shape: ModelShape) -> float:
    d = host_defaults()
    small = shape.dims.vocab_size < 65500
    return d.num("storage", "bytes_per_token_small_vocab" if small else "bytes_per_token_large_vocab")


class TrainFigures:
    """The totals of :func:`train_result` but the checkpoint write time, which its caller decides: this module's
    (:func:`train_result`) or the host sizing's (``estimate()``, :func:`with_host_checkpoint`)."""

    time_to_train_s: Final[float]
    gpu_hours: Final[float]
    energy_kwh: Final[float]
    checkpoint_bytes: Final[int]
    steps: Final[int]
    dataset_read_bytes_per_s: Final[float]

    def __init__(self, time_to_train_s: float, gpu_hours: float, energy_kwh: float, checkpoint_bytes: int,
                 steps: int, dataset_read_bytes_per_s: float) -> None:
        self.time_to_train_s = time_to_train_s
        self.gpu_hours = gpu_hours
        self.energy_kwh = energy_kwh
        self.checkpoint_bytes = checkpoint_bytes
        self.steps = steps
        self.dataset_read_bytes_per_s = dataset_read_bytes_per_s

    def result(self, checkpoint_write_s: float) -> TrainResult:
        return trusted(TrainResult, time_to_train_s=self.time_to_train_s, gpu_hours=self.gpu_hours,
                           energy_kwh=self.energy_kwh, checkpoint_bytes=self.checkpoint_bytes,
                           checkpoint_write_s=checkpoint_write_s, steps=self.steps,
                           dataset_read_bytes_per_s=self.dataset_read_bytes_per_s)


def train_figures(job: Job, shape: ModelShape, layout: Layout, time: TimeResult, gpu: Gpu,
                  server: Server | None) -> TrainFigures | None:
    """:func:`train_result` without the checkpoint write time (``None`` when no token budget is given)."""
    t = job.training
    if not t.train_tokens:
        return None
    tokens_per_step = layout.tokens_per_step(t)
    steps = math.ceil(t.train_tokens / tokens_per_step)
    seconds = t.train_tokens / tokens_per_step * time.step_time_s
    energy_j = node_power_w(layout, gpu, server) * layout.num_nodes * seconds
    return TrainFigures(seconds, layout.world_size * seconds / 3600.0, energy_j / 3.6e6,
                        checkpoint_size(job, shape, layout).total_bytes, steps,
                        time.tokens_per_s * _bytes_per_token(shape))


def train_result(job: Job, shape: ModelShape, layout: Layout, time: TimeResult, gpu: Gpu,
                 server: Server | None, catalog: Catalog) -> TrainResult | None:
    """Totals for ``training.train_tokens`` (``None`` when no token budget is given)."""
    figures = train_figures(job, shape, layout, time, gpu, server)
    if figures is None:
        return None
    return figures.result(_checkpoint(job, shape, layout, server, catalog)[1])


def train_warnings(job: Job, layout: Layout) -> list[str]:
    """A token budget smaller than one optimizer step: the time to train covers only that fraction of it."""
    t = job.training
    if not t.train_tokens:
        return []
    tokens_per_step = layout.tokens_per_step(t)
    if t.train_tokens >= tokens_per_step:
        return []
    return [Text("One optimizer step takes %(step)s tokens, more than the %(budget)s-token budget: time_to_train_s "
                 "covers %(share)s of a step; lower the micro-batch, accumulation or data-parallel size to train "
                 "on the budget.", step=Num(tokens_per_step, ",.0f"), budget=Num(t.train_tokens, ",.0f"),
                 share=Num(t.train_tokens / tokens_per_step, ".2g"))]


def with_host_checkpoint(train: TrainResult | None, host: Any) -> TrainResult | None:
    """``train`` with the host sizing's checkpoint write time (same target, its recommended drives), so that
    one response gives one figure."""
    write_s = _field(host, "checkpoint_write_s")
    if train is None or write_s is None:
        return train
    return train.model_copy(update={"checkpoint_write_s": float(write_s)})
