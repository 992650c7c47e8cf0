"""What the final norm and the LM head save for backward (issue 33): counted in the loss phases by
:func:`estimator.training.activations._head_saved_per_token`, checked against the H200
measurements and the CPU trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from estimator import EstimateRequest
from estimator.job import job_of
from estimator.model.spec import shape_for
from estimator.training.activations import activation_rates
from estimator.training.layout import build_layout

DATA = Path(__file__).parent / "data"


def _h200(case_id: str) -> dict[str, Any]:
    cases = json.loads((DATA / "calibration_h200.json").read_text())["cases"]
    return next(c for c in cases if c["id"] == case_id)


def _head_per_token(body: dict[str, Any]) -> float:
    req = EstimateRequest.model_validate(body)
    job = job_of(req)
    shape = shape_for(req.model)
    return activation_rates(job, shape, build_layout(job, shape)).head_per_token


def test_fsdp2_full_fine_tune_saves_eight_bytes_per_hidden_element_at_the_head() -> None:
    """Llama 3.1 8B full fine-tune under FSDP2 at W = 8 with checkpointing, 4,096 and 16,384 tokens (H200): the
    forward's end grows, beyond the layers' bf16 checkpoints and the fp32 log-probabilities, by 8 B per hidden
    element and token (the final norm's fp32 input, its bf16 normalised tensor and the head's bf16 input), within
    1 %; the estimate's head bytes are those 8 x 4,096 plus the fp32 rsqrt."""
    small, large = _h200("l8b-full-mixed-fused-b1-s4096-ck-fsdp8"), _h200("l8b-full-mixed-fused-b4-s4096-ck-fsdp8")
    h, vocab, layers = 4096, 128_256, 32

    def rest(case: dict[str, Any]) -> tuple[int, int]:
        t = case["request"]["training"]
        tokens = t["seq_len"] * t["micro_batch_size"]
        end = case["measured"]["phase_peaks"][-1]["forward_end"]
        return tokens, end - layers * tokens * h * 2 - 4 * tokens * vocab

    (t1, r1), (t4, r4) = rest(small), rest(large)
    per_token = (r4 - r1) / (t4 - t1)
    assert abs(per_token - 8 * h) / (8 * h) < 0.01, per_token
    assert _head_per_token(small["request"]) == 8 * h + 4


def test_lora_saves_the_norms_fp32_input_only() -> None:
    """A frozen norm and head (LoRA): the final norm's fp32 input and rsqrt, as the CPU trace of Qwen3-30B-A3B
    (``<outside>:norm``, bf16 model as FSDP2's MixedPrecisionPolicy hands it) shows: 8,196 B a token."""
    trace = json.loads((DATA / "fidelity_h100_raw" / "cpu_trace_qwen3_moe.json").read_text())
    traced = trace["trace"]["layer1"]["<outside>:norm"]["torch.float32"]
    case = next(json.loads(line) for line in (DATA / "stacks_h100_raw" / "call3_results.jsonl").read_text().splitlines()
                if "q3a3b" in line)
    assert _head_per_token(case["case"]["request"]) == traced == 4 * 2048 + 4
