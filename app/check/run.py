"""``capplan check --run``: a few real training steps of the request on this machine's GPU, measured as our
calibration measures (``benchmarks/calibration/measure.py``, method in ``docs/calibration-method.md``).

- Random weights: the model is built from its config on the ``meta`` device (as ``--trace`` builds it,
  :func:`app.check.trace._build`), then given memory on the GPU and random values by the calibration's own
  functions (:mod:`app.check.random_init`, which ``measure.py`` imports too); nothing is downloaded.
- The layout: a sharded layout of W GPUs runs its rank 0 on this GPU through the fake process group (its memory
  is one rank's; its step has no real collectives, so only memory is recorded), unless the command runs under
  ``torchrun`` with W processes (``WORLD_SIZE`` = W): then the real ranks run over NCCL and rank 0 records.
- Tensor-parallel layouts (tp > 1): rank 0 of tp x the FSDP shard group, the same way, with the calibration's
  TP method (``benchmarks/calibration/measure_tp.py``): the plan of ``parallelism.tp_plan`` applied by
  :mod:`app.check.tensor_parallel`, the one module both import (:func:`tp_refusal` says what is not run).
- ``steps`` steps (default 5): two of forward, backward and optimizer step with the peak reset per phase (the
  optimizer's states exist from step 2 on), NVML's used memory read after them, then the rest timed without
  resets or syncs inside a step; the step time is their median, tokens/s the global batch's tokens over it.

- Issue 29's mechanisms as the request says, through :mod:`app.check.stacks`, the functions the GPU measurements
  (``benchmarks/calibration/measure_stacks.py``) run: the loss kernel (TRL, torchtune, Liger, Cut Cross-Entropy:
  the library the estimator sizes the request's value as, :func:`app.check.stacks.stack_of`), Liger's kernels,
  TRL's activation offloading around forward and backward, the paged / low-bit / 8-bit AdamW and Muon, the
  allocator setting; what ran is in the result's ``mechanisms``. A library that is not installed exits 2 naming
  the field and the pip package.

The CPU tests cover its record, its refusals, and its steps on the CPU (:func:`run_steps` with ``"cpu"``:
``tests/test_check_run_tp.py``); ``benchmarks/calibration/check_run_batch.py`` runs it on a GPU.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Any

import torch

from app.check import gpu_memory, stacks
from app.check import tensor_parallel as TP
from app.check.random_init import init_weights, materialize
from app.check.tensor_parallel import TP_FAMILIES
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

__all__ = ["MEMORY_STEPS", "device_info", "measure", "run_refusal", "run_steps", "tp_refusal"]

#: steps with the peak reset per phase (forward, backward, optimizer step); the optimizer's states exist from
#: the second on, so the second holds the steady-state peak. The rest are timed.
MEMORY_STEPS = 2


def _nvml() -> tuple[Any, Any]:
    return gpu_memory.nvml(torch.cuda.current_device())


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
    """The device's used memory as the calibration reads it (NVML version 2: the driver's own reservation apart);
    without NVML, torch's ``mem_get_info`` (which counts that reservation as used)."""
    mem = gpu_memory.nvml_memory(*_nvml())
    if mem is not None:
        return mem["used"]
    free, total = torch.cuda.mem_get_info()
    return int(total - free)


def _phase_peak(rec: dict[str, Any], phase: str) -> None:
    torch.cuda.synchronize()
    rec[phase] = max(rec.get(phase, 0), int(torch.cuda.max_memory_allocated()))
    rec[phase + "_reserved"] = max(rec.get(phase + "_reserved", 0), int(torch.cuda.max_memory_reserved()))


def run_refusal(request: EstimateRequest, result: EstimateResponse) -> str | None:
    """Why ``--run`` cannot run ``request`` (its layout from ``result``), naming the request's field, or
    ``None``. Data-parallel layouts (with or without FSDP2 / ZeRO-3 / HSDP shard groups) and tensor-parallel
    ones (:func:`tp_refusal`) run; pipeline, context and expert parallelism do not."""
    tr, lay = request.training, result.layout
    if tr.method == "qlora":
        return ("training.method: QLoRA is not run by capplan check yet "
                "(benchmarks/calibration/measure.py measures it)")
    why = _refusal(request, result, tensor_parallel=True)
    if why:
        return why
    try:
        st, _applied = mechanisms(request)
    except TraceUnsupported as exc:
        return str(exc)
    if lay.tp > 1:
        why = tp_refusal(request, result)
        if why:
            return why
        for field, on in (("training.fused_kernels", st["liger_kernels"]),
                          ("training.activation_offloading", st["offload"] != "none"),
                          ("training.optimizer", st["optimizer"] not in ("adamw", "sgd", "adafactor"))):
            if on:
                return f"{field}: --run's tensor-parallel path (the calibration's TP method) does not apply it"
    return missing_packages(st)


def tp_refusal(request: EstimateRequest, result: EstimateResponse) -> str | None:
    """Why a tensor-parallel request is not run, naming the field, or ``None``. ``--run`` runs the DTensor
    plans the calibration measured (``benchmarks/calibration/measure_tp.py``, :mod:`app.check.tensor_parallel`),
    which are what the estimator's "pytorch" framework assumes: full fine-tunes of Llama-family models, the
    plan of ``parallelism.tp_plan``, the model's loss (materialized logits), sharding none or FSDP2."""
    tr, par = request.training, request.parallelism
    plan = par.resolved_tp_plan
    if par.framework != "pytorch":
        return (f"parallelism.framework: --run applies PyTorch's DTensor tensor-parallel plans (framework "
                f"\"pytorch\"); {par.framework}'s tensor parallelism is not run")
    if tr.method != "full":
        return (f"training.method: --run runs tensor parallelism for full fine-tunes only, not {tr.method} "
                "(the calibration's TP cases)")
    if par.sharding not in ("none", "fsdp", "zero3", "hsdp"):
        return (f"parallelism.sharding: --run runs tensor parallelism with sharding none or FSDP2 "
                f"(fsdp / zero3 / hsdp), not {par.sharding}")
    if plan == "replicated-embeddings" and par.sequence_parallel:
        return ("parallelism.sequence_parallel: Hugging Face's plan (tp_plan \"replicated-embeddings\") has no "
                "sequence-parallel variant")
    if tr.loss_kernel not in (None, "materialized"):
        return (f"training.loss_kernel: --run's tensor-parallel loss is the plan's own on materialized logits, "
                f"not {tr.loss_kernel}")
    cfg = hf_config(request)
    model_type = getattr(cfg, "model_type", None)
    if model_type not in TP_FAMILIES:
        return (f"model: --run's tensor-parallel plans address Llama-family modules ({', '.join(TP_FAMILIES)}), "
                f"not {model_type}")
    if plan == "replicated-embeddings" and getattr(cfg, "tie_word_embeddings", False):
        # the tied pair cannot be one parameter: the embedding is whole, the LM head's weight a vocabulary shard
        # (DTensor refuses the mix); the calibration's -hfplan cases are untied models
        return ("model.tied_embeddings: Hugging Face's plan (tp_plan \"replicated-embeddings\") replicates the "
                "embedding and shards the LM head, so tied embeddings are not run with it")
    return None


def measure(request: EstimateRequest, result: EstimateResponse, steps: int = 5) -> dict[str, Any]:
    """Run ``steps`` steps; the raw measurement in ``measure.py``'s format (``peak_allocated_bytes``,
    ``peak_reserved_bytes``, ``nvml_used_bytes``, ``step_time_s``, ``tokens_per_s``, ``phase_peaks``, ...) plus
    ``memory_only`` (true when the step had no real collectives). Raises :class:`TraceUnsupported` without CUDA
    or for what it cannot build (that first, naming the request's field)."""
    why = run_refusal(request, result)
    if why:
        raise TraceUnsupported(why)
    if not torch.cuda.is_available():
        raise TraceUnsupported("--run needs a CUDA GPU (torch.cuda.is_available() is false on this machine); "
                               "use --trace here, or run on a machine with GPUs")
    return run_steps(request, result, steps, "cuda")


def _peak_of(dev: str, rec: dict[str, Any], phase: str) -> None:
    if dev == "cuda":
        _phase_peak(rec, phase)
    else:  # the CPU run (tests, the batch's dry run): the same steps, no allocator to read
        rec.setdefault(phase, 0)
        rec.setdefault(phase + "_reserved", 0)


def _reset(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def run_steps(request: EstimateRequest, result: EstimateResponse, steps: int, dev: str) -> dict[str, Any]:
    """:func:`measure` on ``dev``: ``"cuda"``, or ``"cpu"`` for the tests and the CPU dry run of
    ``benchmarks/calibration/check_run_batch.py`` (the same model, plan, optimizer and steps; no memory read,
    the peaks are 0)."""
    import torch.distributed as dist

    why = run_refusal(request, result)
    if why:
        raise TraceUnsupported(why)
    steps = max(MEMORY_STEPS + 1, steps)
    tr, par, lay = request.training, request.parallelism, result.layout
    sharded = par.sharding in ("fsdp", "zero3", "hsdp") and lay.shard_group_size > 1
    shard = lay.shard_group_size if sharded else 1
    tp = lay.tp
    world = shard * tp
    real = world > 1 and int(os.environ.get("WORLD_SIZE", "1")) == world
    st, applied = mechanisms(request)
    info: dict[str, Any] = {}
    if dev == "cuda":
        if st["alloc_conf"]:  # before CUDA's first allocation, as measure_stacks.py
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = st["alloc_conf"]
            try:
                torch.cuda.memory._set_allocator_settings(st["alloc_conf"])
            except (RuntimeError, AttributeError) as exc:
                raise TraceUnsupported(f"training.allocator: this torch cannot set {st['alloc_conf']}: "
                                       f"{exc}") from exc
        if real:  # each rank's context on its own GPU
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
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
    raw: dict[str, Any] = {"phase_peaks": [], "memory_only": world > 1 and not real, "world_size": world,
                           "real_ranks": real, "stack": st, "mechanisms": applied, "mechanism_settings": info}
    if world > 1:
        if dist.is_initialized():
            dist.destroy_process_group()
        if real:
            dist.init_process_group("nccl")
        else:
            from torch.testing._internal.distributed.fake_pg import FakeStore

            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        return _steps(request, result, steps, dev, model, cfg, raw, sharded=sharded, shard=shard, mixed=mixed)
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _steps(request: EstimateRequest, result: EstimateResponse, steps: int, dev: str, model: Any, cfg: Any,
           raw: dict[str, Any], *, sharded: bool, shard: int, mixed: bool) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh

    tr, par, lay = request.training, request.parallelism, result.layout
    tp = lay.tp
    offload: Any = contextlib.nullcontext()  # TRL's activation offloading, entered around forward and backward
    vocab = int(cfg.get_text_config().vocab_size)
    accum = tr.gradient_accumulation_steps
    if tp > 1:
        # the calibration's TP method (benchmarks/calibration/measure_tp.py): one implementation
        plan, sp = par.resolved_tp_plan, par.sequence_parallel
        tied = bool(getattr(cfg, "tie_word_embeddings", False))
        mesh = init_device_mesh(dev, (shard, tp), mesh_dim_names=("dp", "tp"))
        TP.apply_tp(model, mesh["tp"], sp, plan)
        raw["tp_plan"] = TP.plan_record(plan, sp, cfg, model)
        if sharded:
            raw["fsdp"] = {"dp": shard, **TP.apply_fsdp(model, mesh["dp"], tied)}
        TP.materialize(model, dev, tied, fsdp=sharded)
        init_weights(model, dev)  # as measure_tp.py: measure.init_weights is app/check/random_init.py's
        raw["local_param_numel"] = int(sum(TP.local(p).numel() for p in model.parameters()))
        params = [p for p in model.parameters() if p.requires_grad]
        groups, raw["param_groups"] = TP.optimizer_groups(params)
        opt = _optimizer(request, groups)
        use_autocast = mixed and not sharded
        x, labels, pos = TP.batch(vocab, tr.micro_batch_size, tr.seq_len, dev)
        vocab_parallel = TP.uses_loss_parallel(tp, plan)

        def micro() -> torch.Tensor:
            return TP.forward_loss(model, x, labels, pos, vocab_parallel=vocab_parallel, device=dev,
                                   autocast=use_autocast)

        def back(loss: torch.Tensor) -> None:
            TP.backward(loss, vocab_parallel=vocab_parallel)
    else:
        if sharded:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mesh = init_device_mesh(dev, (shard,))
            mpp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else \
                MixedPrecisionPolicy()
            for layer in _layers(model):
                fully_shard(layer, mesh=mesh, mp_policy=mpp)
            units = stacks.loss_fsdp_units(raw["stack"]["loss"], model)
            for _name, unit in units:  # as measure_stacks.py: the loss' own FSDP2 units
                fully_shard(unit, mesh=mesh, mp_policy=mpp)
            if units:
                raw["fsdp_extra_units"] = [name for name, _unit in units]
            fully_shard(model, mesh=mesh, mp_policy=mpp)
            model.to_empty(device=dev)
        else:
            materialize(model, dev)
        init_weights(model, dev)  # as measure.py: the same function (app/check/random_init.py)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = _optimizer(request, params, model=model, info=raw["mechanism_settings"])
        g = torch.Generator(device="cpu")
        g.manual_seed(0)
        ids = torch.randint(0, vocab, (tr.micro_batch_size, tr.seq_len), generator=g).to(dev)
        extra = loss_kwargs(raw["stack"])
        if raw["stack"]["offload"] == "trl":
            offload = stacks.offload_context(model, raw["mechanism_settings"], dry=dev != "cuda")

        def micro() -> torch.Tensor:
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=mixed and not sharded):
                return model(input_ids=ids, labels=ids, **extra).loss

        def back(loss: torch.Tensor) -> None:
            loss.backward()

    def scaled() -> torch.Tensor:  # a micro-batch's share of the step's loss (the loss itself without accumulation)
        loss = micro()
        return loss if accum == 1 else loss / accum

    model.train()
    peak_alloc = peak_res = 0
    times = []
    for step in range(1, MEMORY_STEPS + 1):
        rec: dict[str, Any] = {"step": step}
        losses = []
        for _ in range(accum):
            with offload:  # as SFTTrainer.training_step and measure_stacks.py
                _reset(dev)
                loss = scaled()
                _peak_of(dev, rec, "forward")
                _reset(dev)
                back(loss)
                losses.append(float(TP.local(loss.detach()).float().item()))
                del loss
                _peak_of(dev, rec, "backward")
        _reset(dev)
        opt.step()
        opt.zero_grad(set_to_none=True)
        _peak_of(dev, rec, "optimizer")
        peak_alloc = max(peak_alloc, rec["forward"], rec["backward"], rec["optimizer"])
        peak_res = max(peak_res, rec["forward_reserved"], rec["backward_reserved"], rec["optimizer_reserved"])
        rec["loss"] = sum(losses)
        raw["phase_peaks"].append(rec)
    raw["nvml_used_bytes"] = _nvml_used() if dev == "cuda" else None
    # timed steps: no peak resets and no syncs inside the step (as measure.py's timed steps)
    _reset(dev)
    for _ in range(steps - MEMORY_STEPS):
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(accum):
            with offload:
                loss = scaled()
                back(loss)
                del loss
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(dev)
        times.append(time.perf_counter() - t0)
    # as measure.py: the peaks are the memory steps' (phase by phase); the timed steps' own peak and the
    # larger of the two are recorded beside them
    timed_alloc = int(torch.cuda.max_memory_allocated()) if dev == "cuda" else 0
    timed_res = int(torch.cuda.max_memory_reserved()) if dev == "cuda" else 0
    raw["timed_steps_peak_allocated_bytes"] = timed_alloc
    raw["timed_steps_peak_reserved_bytes"] = timed_res
    raw["overall_peak_allocated_bytes"] = max(peak_alloc, timed_alloc)
    raw["overall_peak_reserved_bytes"] = max(peak_res, timed_res)
    raw["peak_allocated_bytes"] = peak_alloc
    raw["peak_reserved_bytes"] = peak_res
    raw["step_times_s"] = times
    raw["step_time_s"] = statistics.median(times)
    tokens = tr.micro_batch_size * tr.seq_len * accum * lay.dp
    raw["tokens_per_step"] = tokens
    raw["tokens_per_s"] = tokens / raw["step_time_s"]
    return raw


def main(argv: list[str] | None = None) -> None:
    """``python -m app.check.run REQUEST --cpu [--steps N] [--json FILE]``: the run path on the CPU (no memory
    read: the peaks are 0), for the CPU dry run of ``benchmarks/calibration/check_run_batch.py`` where
    ``--run`` needs CUDA; it writes the raw measurement (not a record). Exit 2 naming the field for what
    ``--run`` refuses."""
    import argparse
    import json
    import sys
    from pathlib import Path

    from pydantic import TypeAdapter

    from app.core.strict_json import strict_validate
    from estimator import estimate
    from hardware_catalog import load_catalog

    ap = argparse.ArgumentParser(prog="python -m app.check.run", description=main.__doc__)
    ap.add_argument("request_file")
    ap.add_argument("--cpu", action="store_true", required=True, help="run on the CPU (the only mode)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args(argv)
    request = strict_validate(TypeAdapter(EstimateRequest), json.loads(Path(args.request_file).read_text()))
    result = estimate(request, load_catalog())
    try:
        raw = run_steps(request, result, args.steps, "cpu")
    except TraceUnsupported as exc:
        print(f"Error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    print(f"{result.model.name} · {result.layout.world_size} GPU(s) · CPU run of --run's path: world size "
          f"{raw['world_size']}, losses {[round(r['loss'], 3) for r in raw['phase_peaks']]}, "
          f"steps {len(raw['step_times_s']) + MEMORY_STEPS}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
