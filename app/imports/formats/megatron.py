"""Megatron-LM arguments (``megatron/training/arguments.py``) from a command line or a launch script, and NeMo
1.x ``model.*`` / ``trainer.*`` overrides (``nemo/collections/nlp/.../megatron_gpt_config.yaml`` names, mapped to
the Megatron flag each sets).

The model shape comes from ``--num-layers``, ``--hidden-size``, ``--ffn-hidden-size``, ``--num-attention-heads``,
``--num-query-groups``, ``--kv-channels``, ``--swiglu``, ``--normalization``, ``--untie-embeddings-and-output-
weights``, ``--disable-bias-linear``, ``--add-qkv-bias``, ``--num-experts`` / ``--moe-router-topk`` /
``--moe-ffn-hidden-size``; a shape equal to a preset's is that preset. The accumulation is Megatron's own:
``--global-batch-size`` / (``--micro-batch-size`` x data-parallel size)
(``megatron/core/num_microbatches_calculator.py``),
the data-parallel size world / (TP x PP x CP) with the world from ``torchrun --nproc-per-node`` x ``--nnodes``.
"""

from __future__ import annotations

from typing import Any

from app.imports.core import Reader
from app.imports.formats.common import as_int, model_id, words
from app.imports.models import preset_for
from app.imports.safe import ImportProblem
from estimator.model.spec import list_presets, preset

__all__ = ["is_megatron", "read"]

_NEMO = {"trainer.devices": "nproc-per-node", "trainer.num_nodes": "nnodes", "trainer.precision": "nemo-precision",
         "model.encoder_seq_length": "seq-length", "model.num_query_groups": "num-query-groups",
         "model.activations_checkpoint_granularity": "recompute-granularity",
         "model.activations_checkpoint_method": "recompute-method",
         "model.peft.peft_scheme": "nemo-peft", "model.peft.lora_tuning.adapter_dim": "nemo-lora-rank",
         "model.peft.lora_tuning.adapter_dropout": "nemo-lora-dropout", "model.optim.name": "nemo-optim",
         "model.restore_from_path": "nemo-model"}
_SHAPE = {"num-layers": "num_layers", "hidden-size": "hidden_size", "ffn-hidden-size": "ffn_hidden_size",
          "num-attention-heads": "num_attention_heads", "num-query-groups": "num_kv_heads", "kv-channels": "head_dim",
          "num-experts": "num_experts", "moe-router-topk": "experts_per_token",
          "moe-ffn-hidden-size": "moe_ffn_hidden_size", "vocab-size": "vocab_size", "padded-vocab-size": "vocab_size",
          "kv-lora-rank": "kv_lora_rank", "q-lora-rank": "q_lora_rank", "qk-head-dim": "qk_nope_head_dim",
          "qk-pos-emb-head-dim": "qk_rope_head_dim", "v-head-dim": "v_head_dim",
          "moe-shared-expert-intermediate-size": "shared_expert_size"}
#: boolean shape flags: (ModelArch field, value when the flag is given); Megatron's defaults are the other value
_SHAPE_FLAGS = {"swiglu": ("gated_mlp", True), "untie-embeddings-and-output-weights": ("tied_embeddings", False),
                "disable-bias-linear": ("mlp_bias", False), "add-qkv-bias": ("qkv_bias", True),
                "qk-layernorm": ("qk_norm", True), "quick-geglu": ("gated_mlp", True)}
_NO_EFFECT = words("""use-mcore-models rotary-base rotary-percent attention-dropout hidden-dropout init-method-std
apply-layernorm-1p train-samples train-iters lr-decay-samples lr-warmup-samples lr-decay-iters lr-warmup-iters lr
min-lr decoupled-lr decoupled-min-lr lr-decay-style clip-grad weight-decay adam-beta1 adam-beta2 adam-eps
grad-reduce-in-bf16 calculate-per-token-loss manual-gc manual-gc-interval empty-unused-memory-level
exit-duration-in-mins data-path data-cache-path mock-data split tokenizer-type tokenizer-model vocab-file
merge-file save load save-interval eval-interval eval-iters log-interval tensorboard-dir log-throughput
overlap-grad-reduce overlap-param-gather use-distributed-optimizer distributed-backend seed node_rank
node-rank master_addr master-addr master_port master-port rdzv_id rdzv-id rdzv_backend rdzv-backend
rdzv_endpoint rdzv-endpoint standalone no-masked-softmax-fusion attention-softmax-in-fp32 fp8-amax-history-len
fp8-amax-compute-algo fp8-param-gather max-position-embeddings position-embedding-type use-rotary-position-embeddings
make-vocab-size-divisible-by wandb-project wandb-exp-name log-timers-to-tensorboard log-memory-to-tensorboard
log-validation-ppl-to-tensorboard log-params-norm log-num-zeros-in-grad tp-comm-overlap
account-for-embedding-in-pipeline-split account-for-loss-in-pipeline-split ckpt-format dist-ckpt-strictness
no-load-optim no-load-rng finetune exit-on-missing-checkpoint eod-mask-loss distributed-timeout-minutes
use-flash-attn transformer-impl no-gradient-accumulation-fusion no-bias-swiglu-fusion no-rope-fusion
moe-router-load-balancing-type moe-aux-loss-coeff moe-grouped-gemm moe-token-dispatcher-type
moe-router-pre-softmax moe-z-loss-coeff moe-router-dtype moe-permute-fusion bf16-params
untie-embeddings-and-output-weights swiglu group-query-attention normalization disable-bias-linear add-qkv-bias
no-position-embedding num-workers data-args-path per-split-data-args-path no-create-attention-mask-in-dataloader
no-mmap-bin-files lr-warmup-fraction tiktoken-pattern profile profile-step-start profile-step-end profile-ranks
use-rope-scaling rope-type no-bias-gelu-fusion no-bias-dropout-fusion export-force-local-attention
glu-linear-offset softmax-type activation-func-clamp-value enable-gpt-oss accumulate-allreduce-grads-in-fp32
disable-bf16-reduced-precision-matmul moe-per-layer-logging record-memory-history no-check-for-nan-in-loss-and-grad
init-model-with-meta-device use-nccl-ub fsdp-manual-registration logging-level norm-epsilon
moe-router-score-function moe-router-topk-scaling-factor moe-token-drop-policy rotary-scaling-factor mscale
mscale-all-dim multi-latent-attention step-batch-size-schedule""")


def is_megatron(opts: list[tuple[str, str | None]]) -> bool:
    names = {n for n, _ in opts}
    return bool(names & {"num-layers", "tensor-model-parallel-size", "micro-batch-size", "global-batch-size",
                         "model.tensor_model_parallel_size", "model.micro_batch_size", "@pretrain_gpt.py"}) or any(
        n.startswith("@") and "pretrain_" in n for n in names)


def _normal(opts: list[tuple[str, str | None]]) -> list[tuple[str, str, str | None]]:
    """(key as written, Megatron option name, value); NeMo names become the Megatron flag they set."""
    out = []
    for name, value in opts:
        if name.startswith("@"):
            continue
        if name.startswith(("model.", "trainer.", "exp_manager.")):
            flag = _NEMO.get(name) or (name.removeprefix("model.").replace("_", "-") if name.startswith("model.")
                                       else name)
            if flag in ("sequence-parallel",) and value is not None and value.lower() == "false":
                continue
            out.append((name, flag, None if flag == "sequence-parallel" else value))
        else:
            out.append((f"--{name}", name.replace("_", "-") if name in ("nproc_per_node", "nnodes") else name, value))
    return out


def _int(r: Reader, key: str, value: str | None) -> int | None:
    if value is None or "$" in value:
        r.unrepresented(key, value, "a value the script computes at run time (a shell variable): not read")
        return None
    return as_int(r, key, value)


def _shape_presets(arch: dict[str, Any]) -> list[str]:
    """Presets with this shape (and vocabulary, when the arguments give one)."""
    found = []
    for p in list_presets():
        shape = preset(p["id"])
        kv = arch.get("num_kv_heads") or arch["num_attention_heads"]
        if (shape.num_layers, shape.hidden_size, shape.num_attention_heads, shape.num_kv_heads or
                shape.num_attention_heads, shape.ffn_hidden_size, shape.num_experts) == (
                arch["num_layers"], arch["hidden_size"], arch["num_attention_heads"], kv, arch["ffn_hidden_size"],
                arch.get("num_experts", 1)) and arch.get("vocab_size", shape.vocab_size) == shape.vocab_size \
                and arch.get("gated_mlp", True) == shape.gated_mlp:
            found.append(p["id"])
    return found


def read(r: Reader, opts: list[tuple[str, str | None]]) -> None:
    r.set("parallelism.framework", "megatron", "(Megatron arguments)", None, explicit=False)
    values = _normal(opts)
    for name, _ in opts:
        if name.startswith("@") and any(s in name for s in ("pretrain_bert", "pretrain_t5", "pretrain_vlm",
                                                            "pretrain_mamba")):
            r.unrepresented(name[1:], None, "not a decoder-only transformer: sized as a GPT decoder of the same "
                            "shape")
    arch: dict[str, Any] = {}
    arch_keys: dict[str, str] = {}
    mbs = gbs = None
    world: dict[str, int] = {}
    tokenizer = None
    for key, flag, value in values:
        if flag in _SHAPE_FLAGS:
            field, on = _SHAPE_FLAGS[flag]
            arch[field] = on
            arch_keys[field] = key
            continue
        if flag == "normalization":
            arch["norm"] = "rmsnorm" if str(value).lower() == "rmsnorm" else "layernorm"
            continue
        if flag in _SHAPE:
            n = _int(r, key, value)
            if n is not None:
                arch[_SHAPE[flag]] = n
                arch_keys[_SHAPE[flag]] = key
            continue
        if flag == "seq-length":
            n = _int(r, key, value)
            if n is not None:
                r.set("training.seq_len", n, key, value)
        elif flag in ("tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
                      "expert-model-parallel-size"):
            n = _int(r, key, value)
            if n is not None:
                r.set("parallelism." + {"tensor": "tp", "pipeline": "pp", "context": "cp", "expert": "ep"}[
                    flag.split("-")[0]], n, key, value)
        elif flag == "sequence-parallel":
            r.set("parallelism.sequence_parallel", True, key, value)
        elif flag == "num-layers-per-virtual-pipeline-stage":
            r.context["layers_per_virtual"] = (key, _int(r, key, value))
        elif flag == "virtual-pipeline-model-parallel-size":
            n = _int(r, key, value)
            if n is not None and n > 1:
                r.set("training.virtual_stages", n, key, value)
                r.set("training.pipeline_schedule", "interleaved", key, value)
        elif flag in ("decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers"):
            n = _int(r, key, value)
            if n is not None:
                r.set("parallelism." + ("first" if "first" in flag else "last") + "_stage_layers", n, key, value)
        elif flag == "micro-batch-size":
            mbs = _int(r, key, value)
            if mbs is not None:
                r.set("training.micro_batch_size", mbs, key, value)
        elif flag == "global-batch-size":
            gbs = (key, _int(r, key, value))
        elif flag in ("nproc-per-node", "nnodes"):
            n = _int(r, key, value) if value not in (None, "gpu", "auto") else None
            if n is not None:
                world[flag] = n
                r.set("hardware.gpus_per_node" if flag == "nproc-per-node" else "hardware.num_nodes", n, key, value)
        elif flag == "recompute-granularity":
            v = (value or "").lower()
            if v not in ("full", "selective"):
                raise ImportProblem(r.file, key, f"{value!r} is not full or selective")
            r.set("training.activation_checkpointing", v, key, value)
        elif flag == "recompute-activations":
            r.set("training.activation_checkpointing", "selective", key, value)
        elif flag in ("recompute-method", "recompute-num-layers"):
            if flag == "recompute-num-layers" and value not in (None, "1"):
                r.unrepresented(key, value, "full recompute of blocks of layers: sized as every layer recomputed")
            else:
                r.no_effect(key)
        elif flag == "bf16":
            r.set("training.precision", "bf16-mixed", key, value, explicit=False)
        elif flag == "fp16":
            r.unrepresented(key, value, "fp16 with loss scaling: sized as bf16 mixed precision")
            r.set("training.precision", "bf16-mixed", key, value, explicit=False)
        elif flag == "fp8-format":
            r.set("training.precision", "fp8-mixed", key, value)
        elif flag == "nemo-precision":
            v = str(value)
            r.set("training.precision", "fp32" if v in ("32", "fp32", "32-true") else "bf16-mixed", key, value)
        elif flag in ("use-torch-fsdp2", "use-megatron-fsdp", "use-custom-fsdp"):
            r.set("parallelism.sharding", "fsdp", key, value)
        elif flag == "data-parallel-sharding-strategy":
            v = str(value)
            r.set("parallelism.sharding", {"optim": "zero1", "optim_grads": "zero2", "optim_grads_params": "fsdp",
                                           "no_shard": "none"}.get(v, "fsdp"), key, value)
        elif flag == "use-distributed-optimizer":
            if not r.has("parallelism.sharding"):
                r.set("parallelism.sharding", "zero1", key, value, note="distributed optimizer: optimizer states "
                      "and fp32 master sharded over data parallel", explicit=False)
        elif flag == "attention-backend":
            v = str(value).lower()
            r.set("training.attention", {"flash": "flash", "fused": "flash", "auto": "flash", "unfused": "eager",
                                         "local": "eager"}.get(v, "flash"), key, value)
        elif flag == "optimizer" or flag == "nemo-optim":
            v = str(value).lower()
            if v in ("adam", "fused_adam", "distributed_fused_adam", "adamw"):
                r.set("training.optimizer", "adamw", key, value)
            elif v == "sgd":
                r.set("training.optimizer", "sgd", key, value)
            else:
                r.unrepresented(key, value, "an optimizer capplan does not size; sized as AdamW")
        elif flag == "nemo-peft":
            if str(value).lower() == "lora":
                r.set("training.method", "lora", key, value)
            elif str(value).lower() not in ("none", "null"):
                r.unrepresented(key, value, "a PEFT scheme capplan does not size; sized as LoRA")
                r.set("training.method", "lora", key, value)
        elif flag == "nemo-lora-rank":
            n = _int(r, key, value)
            if n is not None:
                r.set("training.lora_rank", n, key, value)
        elif flag == "nemo-model" or flag == "hf-model":
            model_id(r, key, value)
        elif flag == "tokenizer-model":
            tokenizer = (key, value)
            r.no_effect(key)
        elif flag in ("window-size", "window-attn-skip-freq", "moe-layer-freq", "fsdp-double-buffer"):
            r.unrepresented(key, value, {"window-size": "sliding-window attention: sized as full attention",
                                         "window-attn-skip-freq": "which layers use the window: not sized",
                                         "moe-layer-freq": "dense and MoE layers interleaved: sized as every "
                                                           "layer MoE", "fsdp-double-buffer":
                                         "Megatron-FSDP's double-buffered all-gather: one more layer's "
                                         "parameters resident"}[flag])
        elif flag == "cpu-offloading":
            r.unrepresented(key, value, "Megatron activation / weight CPU offloading: not sized")
        elif flag == "cross-entropy-loss-fusion":
            r.stack("training.loss_kernel", "fused", key, value, "Megatron's fused cross-entropy")
        elif flag in _NO_EFFECT or flag.startswith(("exp_manager.", "model.data", "model.optim", "trainer.")):
            r.no_effect(key)
        else:
            r.unknown(key)
    if any(flag == "nemo-peft" for _, flag, _ in values) and r.get("training.method") == "lora":
        r.default("training.lora_targets", "qkv", "NeMo 1.x LoRA adapts the fused q/k/v projection by default "
                  "(lora_tuning.target_modules [attention_qkv])")
    per_stage = r.context.pop("layers_per_virtual", None)
    if per_stage and per_stage[1] and "num_layers" in arch:
        uneven = any(flag == "account-for-embedding-in-pipeline-split" for _, flag, _ in values)
        chunks = (arch["num_layers"] + (2 if uneven else 0)) // per_stage[1]
        stages = max(1, chunks // r.get("parallelism.pp", 1))
        if stages > 1:
            r.set("training.virtual_stages", stages, per_stage[0], per_stage[1],
                  note=f"{chunks} model chunks over {r.get('parallelism.pp', 1)} pipeline stages")
            r.set("training.pipeline_schedule", "interleaved", per_stage[0], per_stage[1])
    _model(r, arch, arch_keys, tokenizer)
    _batch(r, mbs, gbs, world)


def _model(r: Reader, arch: dict[str, Any], keys: dict[str, str], tokenizer: tuple[str, str | None] | None) -> None:
    if r.has("model"):
        return
    needed = ("num_layers", "hidden_size", "num_attention_heads")
    if not all(k in arch for k in needed):
        if arch:
            r.report.needs.append("model: the arguments give part of a shape (" + ", ".join(sorted(arch)) + "): "
                                  "add --num-layers, --hidden-size and --num-attention-heads, or the config.json")
        else:
            r.report.needs.append("model: no shape in the arguments: add the model's config.json as one more file")
        return
    arch.setdefault("ffn_hidden_size", 4 * arch["hidden_size"])
    # Megatron-LM's defaults (megatron/training/arguments.py): GELU MLP, LayerNorm, tied embeddings, biases on
    arch.setdefault("gated_mlp", False)
    arch.setdefault("norm", "layernorm")
    arch.setdefault("tied_embeddings", True)
    bias = arch.pop("mlp_bias", True)
    arch["mlp_bias"] = arch["attention_bias"] = bias
    if arch.get("qkv_bias") and not bias:
        arch["attention_bias"] = False
    shared = arch.pop("shared_expert_size", None)
    if shared and arch.get("moe_ffn_hidden_size"):
        arch["num_shared_experts"] = max(1, shared // arch["moe_ffn_hidden_size"])
    candidates = _shape_presets(arch)
    key = keys.get("num_layers", "--num-layers")
    if len(candidates) > 1 and tokenizer and tokenizer[1]:
        named = preset_for(tokenizer[1])
        candidates = [named] if named in candidates else candidates
    if len(candidates) == 1:
        r.set("model", candidates[0], key, arch["num_layers"], note=f"the shape of preset {candidates[0]}")
        return
    if len(candidates) > 1:
        r.report.needs.append(f"model: the arguments' shape is that of {' and '.join(candidates)} (they differ in "
                              "the vocabulary only): add --vocab-size, the tokenizer or the config.json")
        return
    if "vocab_size" not in arch:
        vocab_from = preset_for(tokenizer[1]) if tokenizer and tokenizer[1] else None
        if vocab_from:
            arch["vocab_size"] = preset(vocab_from).vocab_size
        else:
            arch["vocab_size"] = 128256
            r.report.defaults.append({"field": "model.vocab_size", "value": 128256, "why": "no --vocab-size and no "
                                      "tokenizer capplan knows: Llama 3's 128,256"})
    arch.setdefault("name", "from Megatron arguments")
    r.set("model", arch, key, arch["num_layers"], note="shape from the arguments")


def _batch(r: Reader, mbs: int | None, gbs: tuple[str, int | None] | None, world: dict[str, int]) -> None:
    if gbs is None or gbs[1] is None:
        return
    key, total = gbs
    mbs = mbs or 1
    tp, pp, cp = (r.get(f"parallelism.{n}", 1) for n in ("tp", "pp", "cp"))
    if "nproc-per-node" in world:
        gpus = world["nproc-per-node"] * world.get("nnodes", 1)
        if gpus % (tp * pp * cp) or gpus < tp * pp * cp:
            need = tp * pp * cp
            nodes = -(-need // world["nproc-per-node"])
            r.set("hardware.num_nodes", nodes, key, total, note=f"the script's {gpus} GPUs cannot hold TP x PP x CP "
                  f"= {need}: sized on {nodes} node(s)", overrides=True)
            gpus = nodes * world["nproc-per-node"]
        dp = gpus // (tp * pp * cp)
    else:
        need = tp * pp * cp
        per_node = min(8, need) if need <= 8 else 8
        nodes = -(-need // per_node)
        r.default("hardware.gpus_per_node", per_node, "no torchrun --nproc-per-node: 8 GPUs per node")
        r.default("hardware.num_nodes", nodes, "no torchrun --nnodes: the fewest nodes for TP x PP x CP")
        dp = nodes * per_node // need
    if total % (mbs * dp):
        raise ImportProblem(r.file, key, f"{total} is not a multiple of micro-batch {mbs} x data-parallel {dp} "
                            "(Megatron refuses it)")
    r.set("training.gradient_accumulation_steps", total // (mbs * dp), key, total,
          note=f"global batch / (micro-batch {mbs} x data-parallel {dp})")
