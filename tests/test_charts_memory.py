"""The chart builders are pure: test them on the figure's data, not on pixels."""

from __future__ import annotations

import json

import pytest

from app.charts.compare import metric_bar_figure
from app.charts.memory import MEMORY_LABELS, memory_figure, memory_parts
from app.charts.step_time import step_time_figure, step_time_parts
from app.charts.style import GIB, figure_json
from estimator.response import MemoryBreakdown, MemoryResult, TimeResult


def _memory(capacity_gib: float = 80, **parts_gib: float) -> MemoryResult:
    parts = {kind: int(parts_gib.get(kind, 1) * GIB) for kind in MEMORY_LABELS}
    total = sum(parts.values())
    capacity = int(capacity_gib * GIB)
    return MemoryResult(
        breakdown_bytes=MemoryBreakdown(**parts), peak_allocated_bytes=total - parts["overhead"],
        total_bytes=total, capacity_bytes=capacity, fits=total <= capacity, headroom_bytes=capacity - total,
        max_micro_batch_size=1, error_bar_pct=10.0, peak_phase="backward", busiest_rank="every rank",
    )


def _traces(fig_dict: dict, kind: str) -> list[dict]:
    return [t for t in fig_dict["data"] if t.get("meta", {}).get("kind") == kind]


def test_parts_are_in_stacking_order_and_add_up_to_the_total() -> None:
    mem = _memory(parameters=16, activations=40.5, overhead=3)
    parts = memory_parts(mem)
    assert [k for k, _ in parts] == list(MEMORY_LABELS)
    assert sum(v for _, v in parts) == mem.total_bytes


def test_stacked_bars_sum_to_total_and_capacity_line_is_the_gpu_capacity() -> None:
    mem = _memory(capacity_gib=74.5, parameters=16, gradients=0, activations=30)
    fig = memory_figure([("H100", mem)]).to_dict()
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert [t["name"] for t in bars] == list(MEMORY_LABELS.values())
    assert sum(t["x"][0] for t in bars) == pytest.approx(mem.total_bytes / GIB)
    assert fig["layout"]["barmode"] == "stack"
    (capacity,) = _traces(fig, "capacity")
    assert capacity["name"] == "GPU capacity"
    assert capacity["x"] == pytest.approx([74.5])
    (total,) = _traces(fig, "total")
    assert total["error_x"]["type"] == "percent"
    assert total["error_x"]["value"] == 10.0


def test_one_bar_per_option_each_with_its_own_capacity() -> None:
    small, large = _memory(capacity_gib=80), _memory(capacity_gib=141)
    fig = memory_figure([("A100", small), ("H200", large)]).to_dict()
    (capacity,) = _traces(fig, "capacity")
    assert list(capacity["y"]) == ["A100", "H200"]
    assert capacity["x"] == pytest.approx([80, 141])
    params = next(t for t in fig["data"] if t.get("meta", {}).get("kind") == "parameters")
    assert list(params["y"]) == ["A100", "H200"]


def test_axis_range_shows_both_the_total_and_the_capacity() -> None:
    over = _memory(capacity_gib=40, activations=100)
    fig = memory_figure([("x", over)]).to_dict()
    assert fig["layout"]["xaxis"]["range"][1] >= over.total_bytes / GIB


def _time(**kw: float) -> TimeResult:
    base = dict(step_time_s=2.0, compute_s=1.5, communication_s=0.6, exposed_communication_s=0.2, bubble_s=0.1,
                optimizer_s=0.15, offload_s=0.05, tokens_per_s=1e5, tokens_per_s_per_gpu=1.25e4,
                tflops_per_gpu=400, mfu=0.4, error_bar_pct=15)
    return TimeResult(**{**base, **kw})


def test_step_time_splits_compute_by_the_estimators_breakdown_and_sums_to_the_step() -> None:
    t = _time(breakdown_s={"forward_s": 0.5, "backward_s": 0.9, "data_parallel_s": 0.6})
    parts = step_time_parts(t)
    assert parts == [("Forward", 0.5), ("Backward", 0.9),
                     ("Other compute", pytest.approx(0.1)),
                     ("Communication (not overlapped)", 0.2), ("Pipeline bubble", 0.1), ("Optimizer step", 0.15),
                     ("CPU offload transfers", 0.05)]
    assert sum(v for _, v in parts) == pytest.approx(t.step_time_s)


def test_step_time_falls_back_to_the_named_parts() -> None:
    fig = step_time_figure(_time()).to_dict()
    (bar,) = fig["data"]
    assert tuple(bar["y"])[:1] == ("Compute",)
    assert sum(bar["x"]) == pytest.approx(1.5 + 0.2 + 0.1 + 0.15 + 0.05)


def test_step_time_shows_what_the_named_parts_do_not_explain() -> None:
    parts = step_time_parts(_time(step_time_s=2.5))
    assert parts[-1] == ("Other", pytest.approx(0.5))
    assert sum(v for _, v in parts) == pytest.approx(2.5)


def test_step_time_chart_of_70b_full_offload_on_8x_a100_holds_the_offload_and_sums_to_the_step() -> None:
    """The issue's case: Llama 3.1 70B full fine-tuning, ZeRO-3 with optimizer+params offload, full
    checkpointing, 8x A100 SXM4 80GB. Its step is mostly PCIe offload; the bars used to sum to compute only."""
    from estimator import EstimateRequest, estimate

    req = EstimateRequest.model_validate({
        "model": "llama-3.1-70b", "training": {"method": "full", "activation_checkpointing": "full"},
        "parallelism": {"sharding": "zero3", "offload": "optimizer+params"},
        "hardware": {"gpu": "a100-sxm4-80gb", "num_nodes": 1}})
    time = estimate(req).time
    assert time is not None and time.offload_s > 0
    parts = dict(step_time_parts(time))
    assert parts["CPU offload transfers"] == pytest.approx(time.offload_s)
    assert sum(parts.values()) == pytest.approx(time.step_time_s, rel=1e-9)


def test_metric_bars_mark_missing_values() -> None:
    fig = metric_bar_figure([("A100", 10.0), ("H100", None)], "Throughput", "tokens/s").to_dict()
    (bar,) = fig["data"]
    assert list(bar["x"]) == [10.0, 0.0]
    assert bar["text"][1] == "n/a"


def test_figure_json_is_safe_inside_a_script_tag() -> None:
    fig = memory_figure([("</script><script>alert(1)</script>", _memory())])
    text = figure_json(fig)
    assert "</script>" not in text
    assert json.loads(text)["data"][0]["y"][0].startswith("</script>")
