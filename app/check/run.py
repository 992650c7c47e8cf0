"""``capplan check --run``: a few real training steps of the request on this machine's GPU, measured as our
calibration measures (``benchmarks/calibration/measure.py``, method in ``docs/calibration-method.md``).

- Random weights: the model is built from its config on the ``meta`` device (as ``--trace`` builds it,
  :func:`app.check.trace._build`), then given memory on the GPU and random values by the calibration's own
  functions (:mod:`app.check.random_init`, which ``measure.py`` imports too); nothing is downloaded.
- The layout: a sharded layout of W GPUs runs its rank 0 on this GPU through the fake process group (its memory
  is one rank's; its step has no real collectives, so only memory is recorded), unless the command runs under
  ``torchrun`` with W processes (``WORLD_SIZE`` = W): then the real ranks run over NCCL and rank 0 records.
- ``steps`` steps (default 5): two of forward, backward and optimizer step with the peak reset per phase (the
  optimizer's states exist from step 2 on), NVML's used memory read after them, then the rest timed without
  resets or syncs inside a step; the step time is their median, tokens/s the global batch's tokens over it.

- Issue 29's mechanisms as the request says, through :mod:`app.check.stacks`, the functions the GPU measurements
  (``benchmarks/calibration/measure_stacks.py``) run: the loss kernel (TRL, torchtune, Liger, Cut Cross-Entropy:
  the library the estimator sizes the request's value as, :func:`app.check.stacks.stack_of`), Liger's kernels,
  TRL's activation offloading around forward and backward, the paged / low-bit AdamW and Muon, the allocator
  setting; what ran is in the result's ``mechanisms``. A library that is not installed exits 2 naming the field
  and the pip package.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Any

import torch

from app.check import stacks
from app.check.random_init import init_weights, materialize
from app.check.trace import (
    TraceUnsupported,
    _build,
    _layers,
    _optimizer,
    _refusal,
    hf_config,
    loss_kwargs,
    mechanisms,
    missing_packages,
)
from estimator import EstimateRequest, EstimateResponse

__all__ = ["MEMORY_STEPS", "device_info", "measure"]

#: steps with the peak reset per phase (forward, backward, optimizer step); the optimizer's states exist from
#: the second on, so the second holds the steady-state peak. The rest are timed.
MEMORY_STEPS = 2


def _nvml() -> tuple[Any, Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    except Exception:  # no nvidia-ml-py, or no NVML: the device-wide used memory comes from torch instead
        return None, None


def device_info() -> dict[str, Any]:
    """The GPU's name and the NVIDIA driver version (NVML when it is there)."""
    nv, _h = _nvml()
    driver = None
    if nv is not None:
        try:
            raw = nv.nvmlSystemGetDriverVersion()
            driver = raw.decode() if isinstance(raw, bytes) else str(raw)
        except Exception:
            driver = None
    return {"gpu_name": torch.cuda.get_device_name(), "driver": driver}


def _nvml_used() -> int:
    nv, h = _nvml()
    if nv is not None:
        return int(nv.nvmlDeviceGetMemoryInfo(h).used)
    free, total = torch.cuda.mem_get_info()
    return int(total - free)


def _phase_peak(rec: dict[str, Any], phase: str) -> None:
    torch.cuda.synchronize()
    rec[phase] = max(rec.get(phase, 0), int(torch.cuda.max_memory_allocated()))
    rec[phase + "_reserved"] = max(rec.get(phase + "_reserved", 0), int(torch.cuda.max_memory_reserved()))


def measure(request: EstimateRequest, result: EstimateResponse, steps: int = 5) -> dict[str, Any]:
    """Run ``steps`` steps; the raw measurement in ``measure.py``'s format (``peak_allocated_bytes``,
    ``peak_reserved_bytes``, ``nvml_used_bytes``, ``step_time_s``, ``tokens_per_s``, ``phase_peaks``, ...) plus
    ``memory_only`` (true when the step had no real collectives). Raises :class:`TraceUnsupported` without CUDA
    or for what it cannot build."""
    import torch.distributed as dist

    if not torch.cuda.is_available():
        raise TraceUnsupported("--run needs a CUDA GPU (torch.cuda.is_available() is false on this machine); "
                               "use --trace here, or run on a machine with GPUs")
    why = _refusal(request, result, run=True)
    if why and request.training.method != "qlora":
        raise TraceUnsupported(why)
    if request.training.method == "qlora":
        raise TraceUnsupported("training.method: QLoRA is not run by capplan check yet "
                               "(benchmarks/calibration/measure.py measures it)")
    st, applied = mechanisms(request)
    why = missing_packages(st)
    if why:
        raise TraceUnsupported(why)
    steps = max(MEMORY_STEPS + 1, steps)
    tr, par, lay = request.training, request.parallelism, result.layout
    sharded = par.sharding in ("fsdp", "zero3", "hsdp") and lay.shard_group_size > 1
    world = lay.shard_group_size if sharded else 1
    real = sharded and int(os.environ.get("WORLD_SIZE", "1")) == world
    info: dict[str, Any] = {}
    if st["alloc_conf"]:  # before CUDA's first allocation, as measure_stacks.py
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = st["alloc_conf"]
        try:
            torch.cuda.memory._set_allocator_settings(st["alloc_conf"])
        except (RuntimeError, AttributeError) as exc:
            raise TraceUnsupported(f"training.allocator: this torch cannot set {st['alloc_conf']}: {exc}") from exc
    torch.cuda.init()
    torch.empty(1, device="cuda")
    cfg = hf_config(request)
    if st["liger_kernels"] or st["loss"] == "liger":  # Liger patches the classes: before the model is built
        arch = getattr(cfg, "model_type", "")
        if arch not in stacks.LIGER_FN:
            field = "training.fused_kernels" if st["liger_kernels"] else "training.loss_kernel"
            raise TraceUnsupported(f"{field}: Liger has no patch for transformers' {arch!r} models here "
                                   f"(liger_kernel.transformers: {', '.join(sorted(stacks.LIGER_FN))})")
        stacks.apply_liger(arch, st["liger_kernels"], st["loss"] == "liger", info)
    model = _build(request, cfg, st, info)
    mixed = tr.precision == "bf16-mixed"
    if sharded:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if real:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl")
        else:
            from torch.testing._internal.distributed.fake_pg import FakeStore

            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
        mesh = init_device_mesh("cuda", (world,))
        mpp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else \
            MixedPrecisionPolicy()
        for layer in _layers(model):
            fully_shard(layer, mesh=mesh, mp_policy=mpp)
        fully_shard(model, mesh=mesh, mp_policy=mpp)
        model.to_empty(device="cuda")
    else:
        materialize(model, "cuda")
    init_weights(model, "cuda")  # as measure.py: the same function (app/check/random_init.py)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = _optimizer(request, params, model=model, info=info)
    model.train()
    offload = stacks.offload_context(model, info) if st["offload"] == "trl" else contextlib.nullcontext()
    extra = loss_kwargs(st)
    g = torch.Generator(device="cpu")
    g.manual_seed(0)
    vocab = int(cfg.get_text_config().vocab_size)
    ids = torch.randint(0, vocab, (tr.micro_batch_size, tr.seq_len), generator=g).to("cuda")
    accum = tr.gradient_accumulation_steps

    def micro() -> torch.Tensor:
        if mixed and not sharded:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(input_ids=ids, labels=ids, **extra).loss
        return model(input_ids=ids, labels=ids, **extra).loss

    raw: dict[str, Any] = {"phase_peaks": [], "memory_only": sharded and not real, "world_size": world,
                           "real_ranks": real, "stack": st, "mechanisms": applied, "mechanism_settings": info}
    peak_alloc = peak_res = 0
    times = []
    try:
        for step in range(1, MEMORY_STEPS + 1):
            rec: dict[str, Any] = {"step": step}
            losses = []
            for _ in range(accum):
                with offload:  # TRL's offloading around forward and backward, as SFTTrainer.training_step
                    torch.cuda.reset_peak_memory_stats()
                    loss = micro() / accum
                    _phase_peak(rec, "forward")
                    torch.cuda.reset_peak_memory_stats()
                    loss.backward()
                    losses.append(float(loss.detach()))
                    del loss
                    _phase_peak(rec, "backward")
            torch.cuda.reset_peak_memory_stats()
            opt.step()
            opt.zero_grad(set_to_none=True)
            _phase_peak(rec, "optimizer")
            peak_alloc = max(peak_alloc, rec["forward"], rec["backward"], rec["optimizer"])
            peak_res = max(peak_res, rec["forward_reserved"], rec["backward_reserved"], rec["optimizer_reserved"])
            rec["loss"] = sum(losses)
            raw["phase_peaks"].append(rec)
        raw["nvml_used_bytes"] = _nvml_used()
        # timed steps: no peak resets and no syncs inside the step (as measure.py's timed steps)
        torch.cuda.reset_peak_memory_stats()
        for _ in range(steps - MEMORY_STEPS):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(accum):
                with offload:
                    loss = micro() / accum
                    loss.backward()
                    del loss
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        # as measure.py: the peaks are the memory steps' (phase by phase); the timed steps' own peak and the
        # larger of the two are recorded beside them
        raw["timed_steps_peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        raw["timed_steps_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        raw["overall_peak_allocated_bytes"] = max(peak_alloc, raw["timed_steps_peak_allocated_bytes"])
        raw["overall_peak_reserved_bytes"] = max(peak_res, raw["timed_steps_peak_reserved_bytes"])
    finally:
        if sharded and dist.is_initialized():
            dist.destroy_process_group()
    raw["peak_allocated_bytes"] = peak_alloc
    raw["peak_reserved_bytes"] = peak_res
    raw["step_times_s"] = times
    raw["step_time_s"] = statistics.median(times)
    tokens = tr.micro_batch_size * tr.seq_len * accum * lay.dp
    raw["tokens_per_step"] = tokens
    raw["tokens_per_s"] = tokens / raw["step_time_s"]
    return raw
