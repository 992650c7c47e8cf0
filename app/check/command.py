"""What ``capplan check`` does once it has a request: the trace or the run, and the record beside the estimate.

One path for both command lines: ``capplan check`` (typer, :mod:`app.check.cli`) and ``python -m app.check``
(argparse, :func:`main`). The second needs no web dependency (no FastAPI, SQLAlchemy, typer): torch,
transformers, peft, pydantic and PyYAML only, so a bare GPU machine runs it with the repository on
``PYTHONPATH`` and pydantic's wheels carried (``docs/check.md``, "--run on our GPU").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from estimator import EstimateRequest, EstimateResponse

__all__ = ["check_request", "main"]


def check_request(request: EstimateRequest, result: EstimateResponse, *, trace: bool,
                  steps: int = 5) -> tuple[dict[str, Any], str]:
    """(the measurement record, the header line) of ``--trace`` (``trace``) or ``--run`` for ``request``, whose
    estimate is ``result``. Raises :class:`app.check.trace.TraceUnsupported` for what it cannot check."""
    import torch

    from app.check.record import estimated_figures, measured_figures, record, versions

    estimated = estimated_figures(result)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' / peft's / torch's deprecation notes, not the user's
        if trace:
            from app.check.trace import mechanisms
            from app.check.trace import trace as run_trace

            traced = run_trace(request, result)
            measured: dict[str, Any] = {"peak_allocated_bytes": traced.peak_allocated_bytes,
                                        "parts_bytes": traced.parts_bytes, "unrepresented": traced.unrepresented,
                                        "mechanisms": mechanism_lines(mechanisms(request)[0], traced.mechanisms)}
            gpu_name, driver = None, None
            notes = (f"capplan check --trace: one steady-state iteration on fake tensors, {traced.seconds:.1f} s; "
                     f"peak in the {traced.peak_phase}; " + "; ".join(traced.notes))
            header = (f"traced in {traced.seconds:.1f} s on this CPU (fake tensors; world size {traced.world_size}"
                      f"{', FSDP2 rank 0' if traced.sharded else ''}); peak in the {traced.peak_phase}")
        else:
            from app.check.run import device_info, measure

            raw = measure(request, result, steps)
            measured = measured_figures(raw, memory_only=raw["memory_only"])
            measured["mechanisms"] = mechanism_lines(raw["stack"], raw["mechanisms"])
            info = device_info()
            gpu_name, driver = info["gpu_name"], info["driver"]
            notes = (f"capplan check --run: {steps} steps on {gpu_name}"
                     + ("; one rank of the layout through the fake process group (memory only)"
                        if raw["memory_only"] else ""))
            header = notes
    applied = measured.get("mechanisms") or {}
    if applied:  # what ran for issue 29's fields, under the header (the record carries it too)
        header += "".join(f"\n  applied {field}: {what}" for field, what in applied.items())
    rec = record(kind="trace" if trace else "run", request=request, measured=measured, estimated=estimated,
                 versions_=versions(torch, driver), gpu_name=gpu_name, notes=notes[:2000])
    return rec, header


def mechanism_lines(stack: dict[str, Any], applied: dict[str, str]) -> dict[str, str]:
    """The record's ``mechanisms``: request field -> what ran for it, with the version of the library that ran it
    (:func:`app.check.stacks.needed_packages`)."""
    from app.check import stacks

    out = dict(applied)
    for field, lib in stacks.needed_packages(stack).items():
        name = field.removeprefix("training.")
        pkg = stacks.PACKAGES[lib]
        if name in out:
            out[name] = f"{out[name]} [{pkg} {stacks.dist_version(pkg)}]"[:500]
    return out


def _fail(message: str, code: int = 2) -> None:
    print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> None:
    """``python -m app.check REQUEST (--trace | --run) [--steps N] [--json FILE]``: ``capplan check`` without
    the web dependencies (no ``--post``: post the written record from a machine with capplan installed,
    ``capplan measurements load FILE --post URL --api-key KEY``). Bad input exits 2 naming the field."""
    from pydantic import TypeAdapter, ValidationError

    from app.check.compare import format_rows, part_rows
    from app.check.trace import TraceUnsupported
    from app.core.strict_json import strict_validate
    from estimator import EstimatorError, estimate
    from hardware_catalog import load_catalog

    ap = argparse.ArgumentParser(prog="python -m app.check", description=main.__doc__)
    ap.add_argument("request_file", help="JSON file with one estimate request; - for stdin")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--trace", action="store_true", help="trace one iteration on fake tensors (any CPU)")
    mode.add_argument("--run", action="store_true", help="run a few steps on this machine's GPU")
    ap.add_argument("--steps", type=int, default=5, help="--run: steps (2 for memory, the rest timed; 3-100)")
    ap.add_argument("--json", dest="json_out", help="write the measurement record to this file (- for stdout)")
    args = ap.parse_args(argv)
    if not 3 <= args.steps <= 100:
        _fail(f"--steps: {args.steps} is not in 3..100")
    try:
        text = sys.stdin.read() if args.request_file == "-" else Path(args.request_file).read_text(encoding="utf-8")
        payload = json.loads(text)
    except (OSError, ValueError) as exc:
        _fail(f"(request): cannot read {args.request_file}: {exc}")
    if not isinstance(payload, dict):
        _fail("(request): capplan check takes one request (a JSON object)")
    try:
        request = strict_validate(TypeAdapter(EstimateRequest), payload)
    except ValidationError as exc:
        _fail("; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()))
    try:
        result = estimate(request, load_catalog())
    except EstimatorError as exc:
        _fail(f"{exc.field}: {exc.message}" if exc.field else exc.message)
    try:
        rec, header = check_request(request, result, trace=args.trace, steps=args.steps)
    except TraceUnsupported as exc:
        _fail(str(exc))
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun: rank 0 reports for the layout
        return
    out = sys.stderr if args.json_out == "-" else sys.stdout
    print(f"{result.model.name} · {result.layout.world_size} GPU(s) · {header}", file=out)
    print(format_rows(part_rows(rec["measured"], rec["estimated"])), file=out)
    if args.json_out == "-":
        print(json.dumps(rec, indent=2))
    elif args.json_out:
        Path(args.json_out).write_text(json.dumps(rec, indent=2) + "\n", encoding="utf-8")
