"""The busiest stage found from the stages' allocated sums (memory._busiest, which builds only that stage's phases,
and the largest-micro-batch search's total, memory._busiest_total, which builds none) is the one found by building
every stage's six phases and taking the first with the largest peak, with the same phases, peak phase and overhead,
on a sample of the request guard's estimates at several micro-batch sizes."""

from __future__ import annotations

from pydantic import ValidationError

from estimator.errors import EstimatorError
from estimator.job import job_of
from estimator.model.spec import shape_for
from estimator.request import EstimateRequest
from estimator.training.activations import activation_model, activation_rates
from estimator.training.layout import build_layout
from estimator.training.memory import Phase, _busiest, _busiest_total, _largest, _overhead_input, _phases, _stage_bases
from estimator.training.overhead import hard_overhead_bytes, overhead_bytes


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


def _fields(phases: tuple[Phase, ...]) -> list[tuple[object, ...]]:
    return [(p.name, p.parameters, p.gradients, p.optimizer_states, p.activations, p.logits, p.temporary)
            for p in phases]


def test_the_search_total_is_the_peak_models() -> None:
    checked = 0
    for req in _sample():
        try:
            shape = shape_for(req.model)
            layout = build_layout(job_of(req), shape)
        except EstimatorError:
            continue
        rates, bases = activation_rates(job_of(req), shape, layout), _stage_bases(job_of(req), shape, layout)
        for m in (1, 2, 3, 7, 64):
            act = activation_model(job_of(req), shape, layout, m, rates)
            best_bytes, expected = -1, None  # every stage's phases, the first with the largest peak
            for base in bases:
                rows = _phases(base, act)
                index, top = _largest(rows)
                if top > best_bytes:
                    best_bytes, expected = top, (index, rows, base)
            assert expected is not None
            index, rows, base = expected
            inp = _overhead_input(job_of(req), shape, layout, best_bytes, act, base)
            allocated, got_index, got_rows, stage, got_inp = _busiest(job_of(req), shape, layout, act, bases)
            assert (allocated, got_index, _fields(got_rows), stage) == (best_bytes, index, _fields(rows), base.stage)
            assert (overhead_bytes(got_inp), hard_overhead_bytes(got_inp)) == (overhead_bytes(inp),
                                                                                hard_overhead_bytes(inp))
            assert _busiest_total(job_of(req), shape, layout, act, bases) == best_bytes + hard_overhead_bytes(inp)
            checked += 1
    assert checked > 1000
