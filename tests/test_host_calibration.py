"""Host RAM of CPU-offload training: the estimate against peak host memory measured on one H200 (issue #8).

The measurements come from ``benchmarks/calibration/host_memory.py`` (FSDP2 ``CPUOffloadPolicy(pin_memory=True)``
under the fake process group: one process stands for rank 0 of a W-rank job) and are committed as
``tests/data/host_memory_h200.json``. Until that file exists this test FAILS on purpose: the host-RAM model is
not calibrated without it.

Compared: ``measured.peak_host_bytes`` (the larger of ``ru_maxrss`` and the process's rise of system used
memory, so that pinned pages are counted even where RSS misses them) with the estimate for one process
of that run: framework baseline + offloaded states + pinned rounding + CPU optimizer temporaries; no NCCL
(the fake process group has none), no DataLoader workers, no OS reserve, meta-device init, no checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from estimator.estimate import estimate
from estimator.host.ram import process_ram
from estimator.host_options import GIB, HostOptions
from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.training.checkpoint import checkpoint_size
from estimator.training.layout import build_layout

DATA = Path(__file__).resolve().parent / "data" / "host_memory_h200.json"
TOLERANCE = 0.10
AS_RUN = HostOptions(nccl=False, dataloader_workers=0, include_os_reserved=False, async_checkpoint=False,
                     model_loading="meta").resolved()


def _load() -> dict[str, Any]:
    assert DATA.exists(), (
        f"{DATA.relative_to(DATA.parents[2])} is missing: run benchmarks/calibration/host_memory.py on the H200 "
        "device machine and commit its host_memory_h200.json there (see docs/host-sizing.md)")
    doc: dict[str, Any] = json.loads(DATA.read_text())
    return doc


def estimate_process_bytes(request: dict[str, Any]) -> tuple[int, dict[str, int]]:
    req = EstimateRequest.model_validate(request)
    shape = ModelShape(resolve_model(req.model))
    layout = build_layout(job_of(req), shape)
    ckpt = checkpoint_size(job_of(req), shape, layout)
    _, train = process_ram(job_of(req), shape, layout, ckpt, AS_RUN, rank0=True)
    return train.total, train.items


def _ok_cases() -> list[dict[str, Any]]:
    return [c for c in _load()["cases"] if c.get("status") == "ok"]


def test_calibration_file_is_a_real_device_run() -> None:
    doc = _load()
    assert doc["provenance"].get("dry_run") is False, "the committed file comes from a dry run"
    ok = _ok_cases()
    assert len(ok) >= 3, f"only {len(ok)} cases measured: {[c['id'] for c in doc['cases']]}"
    for case in ok:
        assert case["request"]["parallelism"]["offload"] == "optimizer+params"
        assert case["measured"]["peak_host_bytes"] > 0


def test_host_ram_estimate_within_10_percent() -> None:
    failures = []
    lines = []
    for case in _ok_cases():
        measured = int(case["measured"]["peak_host_bytes"])
        est, items = estimate_process_bytes(case["request"])
        err = (est - measured) / measured
        base = case["measured"].get("baseline_rss_bytes", 0)
        implied = measured - (est - items["framework_baseline"])  # the baseline that would make this case exact
        lines.append(f"{case['id']}: measured {measured / GIB:.2f} GiB, estimate {est / GIB:.2f} GiB ({err:+.1%}); "
                     f"baseline {items['framework_baseline'] / GIB:.2f} GiB, implied {implied / GIB:.2f} GiB, "
                     f"RSS before any state {base / GIB:.2f} GiB")
        if abs(err) > TOLERANCE:
            failures.append(lines[-1])
    assert not failures, "\n".join(["host RAM estimate off by more than 10%:", *failures, "all cases:", *lines])


@pytest.mark.parametrize("field", ["peak_rss_bytes", "peak_host_bytes", "baseline_rss_bytes", "step_time_s",
                                   "gpu_max_memory_allocated_bytes"])
def test_measurements_have_the_recorded_fields(field: str) -> None:
    for case in _ok_cases():
        assert field in case["measured"], f"{case['id']} lacks measured.{field}"


def test_gpu_peak_of_offload_runs_within_10_percent() -> None:
    """The same H200 CPU-offload runs (FSDP2 ``CPUOffloadPolicy``, fake process group, W = 1/8/16) also
    recorded ``torch.cuda.max_memory_allocated()``: the GPU side of offload within the +-10 % memory bar
    of the estimator-core issue (measured 2026-12-02: +2.2 % to +4.5 %)."""
    lines, failures = [], []
    for case in _ok_cases():
        measured = int(case["measured"]["gpu_max_memory_allocated_bytes"])
        est = estimate(EstimateRequest.model_validate(case["request"])).memory
        err = (est.peak_allocated_bytes - measured) / measured
        lines.append(f"{case['id']}: measured {measured / GIB:.2f} GiB, estimate "
                     f"{est.peak_allocated_bytes / GIB:.2f} GiB ({err:+.1%}), peak phase {est.peak_phase}")
        if abs(err) > TOLERANCE or est.error_bar_pct < abs(err) * 100:
            failures.append(lines[-1])
    assert not failures, "\n".join(["GPU peak under CPU offload off:", *failures, "all cases:", *lines])
