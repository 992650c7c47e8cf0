"""What Hugging Face eager attention saves for backward, per decoder layer and token: traced on the CPU.

Run: ``PYTHONPATH=. python benchmarks/check/trace_eager_saved.py`` (a minute on two cores) writes
``tests/data/cpu_trace_eager_attention.json``, read by ``tests/test_eager_attention_saved.py``.

Each case builds its model from config.json fields at real widths with 2 decoder layers, random weights, eager
attention (``attn_implementation="eager"``), and runs one training forward under
``torch.autograd.graph.saved_tensors_hooks``: every storage autograd packs is counted once and attributed to the
innermost module running when it was packed (the method of ``benchmarks/calibration/measure.py``
``probe_saved``, used for GPT-NeoX in ``docs/fidelity-round3.md``). Parameters, and tensors with no dimension of
the sequence's length (the autocast copies of LoRA's adapter weights: per step, not per token) are left out.
Layer 1 is reported (layer 0 shares its input with the embedding). 480 tokens (no width of these models): the
score matrices are heads x 480 x 480 per sequence, so their bytes per token are heads x 480 x bytes per score.
"""

from __future__ import annotations

import json
import platform
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "cpu_trace_eager_attention.json"
SEQ = 480  # no width of these models is 480: a tensor with a dimension of 480 is per token

GEMMA2_9B = {"model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 3584, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
             "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "sliding_window": 4096,
             "query_pre_attn_scalar": 256, "tie_word_embeddings": True}
LLAMA32_1B = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 2048, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256,
              "tie_word_embeddings": True}
#: (id, config.json fields, method, precision): bf16-mixed runs fp32 weights (full) or a bf16 base with peft's
#: fp32 adapters (LoRA) under autocast; bf16-true runs bf16 weights without autocast
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("gemma2_9b_lora_bf16_mixed", GEMMA2_9B, "lora", "bf16-mixed"),
    ("gemma2_9b_lora_bf16_mixed_window128", {**GEMMA2_9B, "sliding_window": 128}, "lora", "bf16-mixed"),
    ("gemma2_9b_full_bf16_true", GEMMA2_9B, "full", "bf16-true"),
    ("llama32_1b_full_bf16_mixed", LLAMA32_1B, "full", "bf16-mixed"),
    ("llama32_1b_lora_bf16_mixed", LLAMA32_1B, "lora", "bf16-mixed"),
]


def saved_per_layer(cfg_fields: dict[str, Any], method: str, precision: str, seq: int = SEQ) -> dict[str, Any]:
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**cfg_fields)
    dtype = torch.float32 if method == "full" and precision == "bf16-mixed" else torch.bfloat16
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="eager")
    model.config.use_cache = False
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                 lora_dropout=0.0, bias="none"))
    model.train()
    ids = torch.randint(0, int(cfg.vocab_size), (1, seq))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    stack: list[str] = []
    hooks = []
    for name, mod in model.named_modules():
        hooks.append(mod.register_forward_pre_hook(lambda _m, _a, name=name: stack.append(name)))
        hooks.append(mod.register_forward_hook(lambda _m, _a, _o: (stack.pop(), None)[1]))
    seen: dict[int, tuple[str, int, str, tuple[int, ...], str]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in params and ptr not in seen and st.nbytes() > 0 and seq in t.shape:
            seen[ptr] = (stack[-1] if stack else "", int(st.nbytes()), str(t.dtype).replace("torch.", ""),
                         tuple(t.shape), t.grad_fn.name() if t.grad_fn is not None else "")
        return t

    ctx = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
    with warnings.catch_warnings(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
        warnings.simplefilter("ignore")
        loss = model(input_ids=ids, labels=ids).loss
    for h in hooks:
        h.remove()
    del loss
    by_module: dict[str, int] = {}
    attention: list[dict[str, Any]] = []
    total = 0
    for name, nbytes, dt, shape, fn in seen.values():
        m = re.search(r"layers\.1\.(.*)$", name)
        if not m:
            continue
        key = re.sub(r"\.default$", "", m.group(1))
        total += nbytes
        by_module[key] = by_module.get(key, 0) + nbytes
        if key == "self_attn":
            attention.append({"dtype": dt, "shape": list(shape), "saved_by": fn, "bytes_per_token": nbytes / seq})
    return {"seq_len": seq, "layer1_bytes_per_token": total / seq,
            "layer1_by_module_bytes_per_token": {k: v / seq for k, v in sorted(by_module.items())},
            "attention_core_saved": attention}


def main() -> None:
    import peft
    import transformers

    out: dict[str, Any] = {
        "what": __doc__.split("\n\n")[1].replace("\n", " "),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                     "python": platform.python_version()},
        "cases": {}}
    for cid, cfg, method, precision in CASES:
        print(cid, file=sys.stderr, flush=True)
        out["cases"][cid] = {"config": cfg, "method": method, "precision": precision,
                             **saved_per_layer(cfg, method, precision)}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(OUT)


if __name__ == "__main__":
    main()
