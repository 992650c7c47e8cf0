"""The estimator's memos never carry one request's answer into another's (the same job, the same figures, whatever
was estimated before it in the process).

Found by the full suite on 2026-12-06: once the app had seeded its shipped ``capplan check --run`` records (one a
chunked-loss Llama 3.2 1B full fine-tune), the accuracy report's plain Llama 3.2 1B cases came out 0.06-0.25 GiB
lower: ``activations._rates_key`` left out ``training.loss_kernel``, which the final norm's and LM head's saved
bytes (``_head_saved_per_token``) read. Each request here is estimated after every memo is emptied, then in one
process in order and in reverse order (so every pair meets in both orders); the answers must be identical."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.calibration.stacks_compare import load_measured, request_for
from estimator import EstimateRequest, estimate
from estimator.errors import EstimatorError
from estimator.memo import clear_all

ROOT = Path(__file__).resolve().parents[1]


def _requests() -> list[EstimateRequest]:
    calibration = json.loads((ROOT / "tests" / "data" / "calibration_h200.json").read_text())
    bodies: list[dict[str, Any]] = [c["request"] for c in calibration["cases"]]
    bodies += [b for c in load_measured(issues=(29, 33)) if (b := request_for(c)) is not None]
    bodies += [r["request"] for r in
               json.loads((ROOT / "app" / "data" / "measurements" / "check_run_h100.json").read_text())]
    return [EstimateRequest.model_validate(b) for b in bodies]


def _answer(req: EstimateRequest) -> str:
    try:
        return estimate(req).model_dump_json()
    except EstimatorError as exc:
        return f"refused: {exc.field}: {exc.message}"


def test_no_request_changes_another_requests_answer() -> None:
    reqs = _requests()
    assert len(reqs) >= 150
    cold = []
    for r in reqs:
        clear_all()
        cold.append(_answer(r))
    clear_all()
    forward = [_answer(r) for r in reqs]
    clear_all()
    backward = [_answer(r) for r in reversed(reqs)][::-1]
    differ = [i for i in range(len(reqs)) if not (cold[i] == forward[i] == backward[i])]
    assert not differ, [reqs[i].model_dump(mode="json", exclude_defaults=True) for i in differ[:3]]
