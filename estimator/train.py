"""Time to train a token budget, GPU-hours, energy, checkpoint size and write time, dataloader bandwidth.

- Steps: ``ceil(train_tokens / tokens per step)``, tokens per step = micro-batch x sequence x accumulation x dp;
  time to train = steps x step time (no restarts, evaluation or checkpoint stalls).
- GPU-hours: world size x time to train.
- Energy (IT energy at the servers, no PUE; multiply by the site's PUE, e.g. 1.1-1.6 in
  ``hardware_catalog`` TCO defaults): each node draws ``average_draw_fraction`` (0.75) of its peak, the peak
  being the catalog server's ``max_power_kw`` (less the TDP of empty GPU slots) or, without a server,
  ``server_watts_per_gpu_tdp`` (1.82, DGX H100: 10.2 kW for 8 x 700 W) x GPUs x TDP
  (``estimator/data/host_defaults.yaml``, from epoch-research/training-cost-trends ``energy.py``).
- Checkpoint: the bytes of one checkpoint (weights + optimizer states by framework and layout,
  :func:`estimator.host_checkpoint.checkpoint_size`, DCP format) and the time for the busiest node to write
  its share to local NVMe: the server's data drives (``nvme_bays``, else 2) at the catalog's per-drive write
  rate for its PCIe generation.
- Dataloader: tokens/s x bytes per stored token (Megatron ``indexed_dataset.py``: uint16 below 65,500 tokens of
  vocabulary, int32 above).
"""

from __future__ import annotations

import math
from typing import Any

from estimator.host_checkpoint import checkpoint_size
from estimator.host_config import host_defaults
from estimator.layout import Layout
from estimator.modelspec import ModelShape
from estimator.request import EstimateRequest
from estimator.response import TimeResult, TrainResult

__all__ = ["node_power_w", "train_result"]

DEFAULT_DATA_DRIVES = 2
NVME_WRITE_GBPS = {4: 5.1, 5: 6.6}  # fallback per-drive writes (catalog nvme-gen4-x4 / nvme-gen5-x4)


def _field(obj: Any, name: str, default: Any = None) -> Any:
    return getattr(obj, name, default) if obj is not None else default


def node_power_w(layout: Layout, gpu: Any, server: Any | None) -> float:
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


def _drive_write_bps(server: Any | None, catalog: Any) -> float:
    gen = int(_field(server, "pcie_gen", 5) or 5)
    best: tuple[int, float] | None = None
    for s in (_field(catalog, "storage", {}) or {}).values():
        if _field(s, "kind") == "local-nvme" and _field(s, "scope") == "per-drive" and _field(s, "write_gbps"):
            dist = abs(int(_field(s, "pcie_gen", gen) or gen) - gen)
            if best is None or dist < best[0]:
                best = (dist, float(_field(s, "write_gbps")))
    gbps = best[1] if best else NVME_WRITE_GBPS.get(gen, NVME_WRITE_GBPS[4])
    return gbps * 1e9


def _checkpoint(req: EstimateRequest, shape: ModelShape, layout: Layout, server: Any | None,
                catalog: Any) -> tuple[int, float]:
    size = checkpoint_size(req, shape, layout)
    drives = int(_field(server, "nvme_bays", 0) or DEFAULT_DATA_DRIVES)
    write = max(1, drives) * _drive_write_bps(server, catalog)
    return size.total_bytes, size.per_node_bytes / write


def _bytes_per_token(shape: ModelShape) -> float:
    d = host_defaults()
    small = shape.arch.vocab_size < 65500
    return d.num("storage", "bytes_per_token_small_vocab" if small else "bytes_per_token_large_vocab")


def train_result(req: EstimateRequest, shape: ModelShape, layout: Layout, time: TimeResult, gpu: Any,
                 server: Any | None, catalog: Any) -> TrainResult | None:
    """Totals for ``training.train_tokens`` (``None`` when no token budget is given)."""
    t = req.training
    if not t.train_tokens:
        return None
    tokens_per_step = t.micro_batch_size * t.seq_len * t.gradient_accumulation_steps * layout.dp
    steps = math.ceil(t.train_tokens / tokens_per_step)
    seconds = steps * time.step_time_s
    energy_j = node_power_w(layout, gpu, server) * layout.num_nodes * seconds
    ckpt_bytes, ckpt_s = _checkpoint(req, shape, layout, server, catalog)
    return TrainResult(time_to_train_s=seconds, gpu_hours=layout.world_size * seconds / 3600.0,
                       energy_kwh=energy_j / 3.6e6, checkpoint_bytes=ckpt_bytes, checkpoint_write_s=ckpt_s,
                       steps=steps, dataset_read_bytes_per_s=time.tokens_per_s * _bytes_per_token(shape))
