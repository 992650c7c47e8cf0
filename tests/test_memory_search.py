"""The largest-micro-batch search's total at each size it tries (memory._busiest_total: the busiest stage's peak
and hard overhead without building the phases) is the peak model's own (memory._busiest and
overhead.hard_overhead_bytes), on a sample of the request guard's estimates at several micro-batch sizes."""

from __future__ import annotations

from pydantic import ValidationError

from estimator.activations import activation_model, activation_rates
from estimator.errors import EstimatorError
from estimator.layout import build_layout
from estimator.memory import _busiest, _busiest_total, _stage_bases
from estimator.modelspec import shape_for
from estimator.overhead import hard_overhead_bytes
from estimator.request import EstimateRequest


def _sample() -> list[EstimateRequest]:
    from benchmarks.guard import requests

    out = []
    for kind, body in requests():
        if kind == "estimate":
            try:
                out.append(EstimateRequest.model_validate(body))
            except ValidationError:
                continue
    return out[::5]


def test_the_search_total_is_the_peak_models() -> None:
    checked = 0
    for req in _sample():
        try:
            shape = shape_for(req.model)
            layout = build_layout(req, shape)
        except EstimatorError:
            continue
        rates, bases = activation_rates(req, shape, layout), _stage_bases(req, shape, layout)
        for m in (1, 2, 3, 7, 64):
            act = activation_model(req, shape, layout, m, rates)
            allocated, _, _, _, inp = _busiest(req, shape, layout, act, bases)
            assert _busiest_total(req, shape, layout, act, bases) == allocated + hard_overhead_bytes(inp)
            checked += 1
    assert checked > 1000
