"""Per-GPU model states under expert, context and data parallelism, offload, ZeRO-2 and DDP buckets.

The expected numbers are derived by hand from the frameworks' own accounting, cited per test:
- Megatron-Core ``parallel_state.py``: routed experts split over ep, their states sharded over the expert
  data-parallel group world / (ep x etp x pp); dense states over dp x cp;
- DeepSpeed ``estimate_zero2_model_states_mem_needs`` (``stage_1_and_2.py``): ZeRO-2 = 2P + 18P/N;
- PyTorch DDP ``reducer.cpp``: one flat bucket copy of every gradient (``gradient_as_bucket_view=False``).
"""

import itertools

import pytest

from estimator.errors import InvalidRequestError
from estimator.job import job_of
from estimator.model.spec import ModelShape, list_presets, resolve_model
from estimator.request import EstimateRequest
from estimator.training.layout import build_layout
from estimator.training.memory import MemoryPeak, peak_memory
from estimator.training.params import lora_params_per_layer

GIB = 1 << 30
H200 = 141 * 10**9


def _peak(body: dict) -> tuple[MemoryPeak, ModelShape]:
    req = EstimateRequest.model_validate(body)
    shape = ModelShape(resolve_model(req.model))
    return peak_memory(job_of(req), shape, build_layout(job_of(req), shape), H200), shape


def _phase(peak: MemoryPeak, name: str):  # type: ignore[no-untyped-def]
    return next(p for p in peak.phases if p.name == name)


# ------------------------------------------------------------------------------ no negative item, ever
PRESETS = [p["id"] for p in list_presets()]
METHODS = ["full", "lora", "qlora"]
LAYOUTS = [
    {},
    {"sharding": "zero1"},
    {"sharding": "zero2"},
    {"sharding": "fsdp"},
    {"sharding": "hsdp", "hsdp_shard_size": 4},
    {"sharding": "zero3", "offload": "optimizer"},
    {"sharding": "zero3", "offload": "optimizer+params"},
    {"sharding": "zero1", "offload": "optimizer", "framework": "deepspeed"},
    {"sharding": "zero2", "offload": "optimizer", "framework": "deepspeed"},
    {"sharding": "zero1", "framework": "megatron", "tp": 2, "pp": 2, "sequence_parallel": True},
    {"sharding": "fsdp", "cp": 2},
    {"sharding": "fsdp", "ep": 2},
    {"ep": 8},
    {"sharding": "fsdp", "ep": 8, "tp": 2},
]


@pytest.mark.parametrize(("preset_id", "method"), list(itertools.product(PRESETS, METHODS)))
def test_no_memory_item_is_negative(preset_id: str, method: str) -> None:
    """Every phase's every item, and the overhead, is >= 0 over presets x methods x layouts (the ones the
    validator accepts for this model); a negative item once let an over-full MoE QLoRA 'fit'."""
    checked = 0
    for par in LAYOUTS:
        body = {"model": preset_id, "training": {"method": method, "seq_len": 2048},
                "parallelism": par, "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 2}}
        try:
            peak, _ = _peak(body)
        except InvalidRequestError:
            continue
        checked += 1
        for ph in peak.phases:
            items = (ph.parameters, ph.gradients, ph.optimizer_states, ph.activations, ph.logits, ph.temporary)
            assert min(items) >= 0, (par, ph)
        assert peak.overhead >= 0
    assert checked >= 5


# ------------------------------------------------------------------------------------ expert parallelism
def test_qlora_mixtral_ep2_holds_half_the_experts_in_nf4() -> None:
    """Mixtral 8x7B QLoRA, ep=2 on 8 H200: each rank stores 4 of 8 experts per layer in NF4 (~0.52 byte) and
    the rest in NF4/bf16; before the fix the parameter item was -19 GiB and the run 'fit'."""
    peak, shape = _peak({"model": "mixtral-8x7b", "training": {"method": "qlora"}, "parallelism": {"ep": 2},
                         "hardware": {"gpu": "h200-sxm-141gb"}})
    routed = shape.moe_layers * shape.routed_expert_params_per_layer()
    nf4_experts = 0.52 * routed / 2
    params = _phase(peak, "optimizer").parameters
    assert nf4_experts < params < nf4_experts + 2 * (shape.total_params() - routed) + 1 * GIB


def test_deepseek_v3_fsdp_ep256_keeps_one_expert_per_layer_unsharded() -> None:
    """DeepSeek-V3 FSDP, ep=256 on 256 GPUs: the expert data-parallel group is 256/256 = 1, so every rank keeps
    fp32 AdamW states of its own expert in all 58 MoE layers: 58 x 44M x 8 bytes = 20.4 GB (>= 21 GB with the
    sharded dense part). Before the fix the experts were sharded a second time over dp: 0.57 GiB."""
    peak, shape = _peak({"model": "deepseek-v3", "parallelism": {"sharding": "fsdp", "ep": 256},
                         "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 32}})
    per_expert = shape.routed_expert_params_per_layer() // shape.arch.num_experts
    expected = 8 * shape.moe_layers * per_expert + 8 * (shape.total_params() - shape.moe_layers
                                                         * shape.routed_expert_params_per_layer()) / 256
    opt = _phase(peak, "optimizer").optimizer_states
    assert opt >= 20e9
    assert abs(opt - expected) / expected < 0.01


@pytest.mark.parametrize(("ep", "nodes"), [(2, 1), (8, 2)])
def test_fsdp_expert_states_add_up_to_the_model(ep: int, nodes: int) -> None:
    """Fully sharded states are a partition: AdamW states (8 bytes) summed over the ranks = 8 x total params
    (dense over dp x cp, experts over world / ep; Mixtral 8x7B, 1 or 2 nodes of 8)."""
    peak, shape = _peak({"model": "mixtral-8x7b", "parallelism": {"sharding": "fsdp", "ep": ep},
                         "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": nodes}})
    world = 8 * nodes
    total = world * _phase(peak, "optimizer").optimizer_states
    assert abs(total - 8 * shape.total_params()) / (8 * shape.total_params()) < 0.001


def test_ddp_expert_parallel_autocast_cache_counts_local_experts_only() -> None:
    """DDP with ep=8 (Mixtral 8x7B, 8 GPUs): each rank holds 1 of 8 experts; its autocast bf16 weight cache
    (2 bytes per local linear weight) must not count all 8."""
    peak, shape = _peak({"model": "mixtral-8x7b", "parallelism": {"ep": 8}, "hardware": {"gpu": "h200-sxm-141gb"}})
    routed = shape.moe_layers * shape.routed_expert_params_per_layer()
    local = shape.total_params() - routed + routed // 8
    fwd = _phase(peak, "forward").parameters  # fp32 parameters + the bf16 cache of the linears
    assert fwd <= 6 * local
    assert fwd >= 4 * local


# ------------------------------------------------------------------------------------- context parallel
def test_context_parallel_shards_states_like_data_parallel() -> None:
    """torchtitan/Megatron shard over dp x cp: Llama 3.1 8B FSDP on 8 GPUs holds the same states at cp=8
    (dp=1) as at cp=1 (dp=8). Before the fix cp=8 left them unsharded (125 GiB)."""
    body = {"model": "llama-3.1-8b", "hardware": {"gpu": "h200-sxm-141gb"}}
    cp8, _ = _peak({**body, "parallelism": {"sharding": "fsdp", "cp": 8}})
    cp1, _ = _peak({**body, "parallelism": {"sharding": "fsdp", "cp": 1}})
    a, b = _phase(cp8, "optimizer"), _phase(cp1, "optimizer")
    assert (a.parameters, a.optimizer_states, a.gradients) == (b.parameters, b.optimizer_states, b.gradients)
    assert cp8.peak_allocated < 30 * GIB


# ------------------------------------------------------------------------------------------ CPU offload
def _8b(**par: object) -> tuple[MemoryPeak, ModelShape]:
    return _peak({"model": "llama-3.1-8b", "parallelism": par, "hardware": {"gpu": "h200-sxm-141gb"}})


@pytest.mark.parametrize(("framework", "sharding"), [("pytorch", "zero3"), ("deepspeed", "zero3"),
                                                     ("deepspeed", "zero2"), ("pytorch", "zero2")])
def test_offload_moves_partitioned_gradients_off_the_gpu(framework: str, sharding: str) -> None:
    """FSDP2 CPUOffloadPolicy (foreach_reduce copies the reduce-scatter output to the CPU) and DeepSpeed
    ZeRO-2/3 cpu_offload (partition gradients copied to the CPU buffer, the rest cleared): no gradient stays."""
    peak, _ = _8b(framework=framework, sharding=sharding, offload="optimizer")
    assert _phase(peak, "optimizer").gradients <= 1 * GIB  # at most DeepSpeed ZeRO-3's IPG bucket


def test_zero1_offload_keeps_the_unpartitioned_gradients() -> None:
    """DeepSpeed ZeRO-1 (stage-1 branch of reduce_ipg_grads) keeps every bf16 param.grad on the GPU: 2 bytes x
    8.03B = 15 GiB; PyTorch keeps its fp32 .grad (4 bytes)."""
    ds, shape = _8b(framework="deepspeed", sharding="zero1", offload="optimizer")
    pt, _ = _8b(framework="pytorch", sharding="zero1", offload="optimizer")
    n = shape.total_params()
    assert _phase(ds, "backward-end").gradients == pytest.approx(2 * n, rel=0.001)
    assert _phase(pt, "backward-end").gradients >= 4 * n


# ---------------------------------------------------------------------------------------------- ZeRO-2
def test_deepspeed_zero2_parameters_match_its_estimator_and_zero1() -> None:
    """DeepSpeed ZeRO-2: bf16 parameters replicated (2P) + fp32 master sharded (4P/N); ZeRO-1 holds the same
    parameters, so ZeRO-2 must not hold more (it used to add another bf16 copy)."""
    z2, shape = _8b(framework="deepspeed", sharding="zero2")
    z1, _ = _8b(framework="deepspeed", sharding="zero1")
    n = shape.total_params()
    assert _phase(z2, "optimizer").parameters == pytest.approx(2 * n + 4 * n / 8, rel=0.001)
    assert max(p.parameters for p in z2.phases) <= max(p.parameters for p in z1.phases)


def test_pytorch_zero2_is_fsdp2_shard_grad_op() -> None:
    """FSDP2 reshard_after_forward=False: fp32 shards (4P/N) always, plus the bf16 unsharded parameters (2P)
    from forward until post_backward reshards them; never the 4P + 2P it used to count."""
    peak, shape = _8b(sharding="zero2")
    n = shape.total_params()
    assert _phase(peak, "forward").parameters == pytest.approx(4 * n / 8 + 2 * n, rel=0.001)
    assert _phase(peak, "optimizer").parameters == pytest.approx(4 * n / 8, rel=0.001)


# ------------------------------------------------------------------------------------ gradient buffers
def test_ddp_bucket_is_one_more_gradient_copy() -> None:
    """PyTorch DDP (gradient_as_bucket_view=False) on 8 GPUs: the fp32 buckets (4 bytes x P) exist from the
    start; .grad adds another 4P at the end of backward. One GPU has no DDP wrapper and no bucket."""
    ddp, shape = _8b()
    one, _ = _peak({"model": "llama-3.1-8b", "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": 1}})
    n = shape.total_params()
    assert _phase(ddp, "forward").gradients == pytest.approx(4 * n, rel=0.001)
    assert _phase(ddp, "backward-end").gradients == pytest.approx(8 * n, rel=0.001)
    assert _phase(one, "forward").gradients == 0
    assert _phase(one, "backward-end").gradients == pytest.approx(4 * n, rel=0.001)


def test_megatron_grad_buffer_exists_in_forward() -> None:
    """Megatron's DistributedDataParallel allocates its contiguous fp32 main_grad buffer once and keeps it."""
    peak, shape = _peak({"model": "llama-3.1-8b", "parallelism": {"framework": "megatron", "sharding": "zero1"},
                         "hardware": {"gpu": "h200-sxm-141gb"}})
    assert _phase(peak, "forward").gradients == pytest.approx(4 * shape.total_params(), rel=0.001)


# ----------------------------------------------------------------------------------------------- LoRA
@pytest.mark.parametrize(("precision", "per_param", "adapter"), [("fp32", 4, 4), ("bf16-mixed", 2, 4),
                                                                  ("bf16-true", 2, 2)])
def test_lora_frozen_base_is_stored_in_the_training_dtype(precision: str, per_param: int, adapter: int) -> None:
    """The frozen base in bf16 for bf16 training and in fp32 for fp32 training (it was always 2 bytes), plus
    the adapters in their own dtype (fp32 under bf16-mixed)."""
    peak, shape = _peak({"model": "llama-3.2-1b", "training": {"method": "lora", "precision": precision},
                         "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": 1}})
    adapters = lora_params_per_layer(shape, 16, "all-linear") * shape.arch.num_layers
    expected = per_param * shape.total_params() + adapter * adapters
    assert _phase(peak, "optimizer").parameters == pytest.approx(expected, rel=0.001)


# ------------------------------------------------------------------------------- selective recomputation
def test_selective_recompute_drops_the_eager_score_matrices() -> None:
    """Korthikanti et al. 2022 Sec. 5: selective recomputation stores no attention scores; backward rebuilds
    one layer's at a time. Llama 3.2 1B, seq 8192, eager: stored activations as small as with SDPA
    (they were 207.8 GiB vs 208.3 without checkpointing); the transient is one layer's fp32 + bf16 softmax
    (6 bytes x 32 heads x 8192^2 = 12 GiB)."""
    def run(attention: str, ckpt: str) -> MemoryPeak:
        return _peak({"model": "llama-3.2-1b", "training": {"seq_len": 8192, "attention": attention,
                                                            "activation_checkpointing": ckpt},
                      "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": 1}})[0]

    eager_sel, sdpa_sel, eager_none = run("eager", "selective"), run("sdpa", "selective"), run("eager", "none")
    stored = _phase(eager_sel, "forward").activations
    assert stored == _phase(sdpa_sel, "forward").activations
    assert stored < _phase(eager_none, "forward").activations / 10
    scores = 6 * 32 * 8192 * 8192
    assert _phase(eager_sel, "backward-layer").temporary >= scores


def test_assumptions_state_the_expert_shards_the_ddp_buckets_and_the_lora_base_dtype() -> None:
    from estimator import estimate

    moe = estimate(EstimateRequest.model_validate({
        "model": "mixtral-8x7b", "parallelism": {"sharding": "fsdp", "ep": 8},
        "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 2}}))
    assert any("routed experts: split over ep 8, sharded over 2" in a for a in moe.assumptions)
    ddp = estimate(EstimateRequest.model_validate({"model": "llama-3.2-1b"}))
    assert any("gradient_as_bucket_view" in a for a in ddp.assumptions)
    lora = estimate(EstimateRequest.model_validate({
        "model": "llama-3.2-1b", "training": {"method": "lora", "precision": "fp32"},
        "hardware": {"gpus_per_node": 1}}))
    assert any("frozen base in fp32." in a for a in lora.assumptions)
    assert not any("gradient_as_bucket_view" in a for a in lora.assumptions)


def test_activation_rates_are_shared_only_where_they_are_equal() -> None:
    """``activations._rates_key`` keys the layout by what ``_activation_rates`` reads (tensor and context degrees,
    sequence parallelism, sharding): across node counts, frameworks, shardings, TP/PP/CP layouts, methods and
    checkpointing each memoised answer is the one computed afresh (fails when a read is left out of the key)."""
    from pydantic import ValidationError

    from estimator.memo import clear_all
    from estimator.model.spec import shape_for
    from estimator.training.activations import _activation_rates, activation_rates

    names = ("per_token", "recompute_per_token", "attention_backward_per_token", "residual_dtype", "residual_div",
             "tokens_per_sequence", "full_checkpointing")
    clear_all()
    compared = 0
    for fw, sh in (("pytorch", "zero3"), ("pytorch", "none"), ("deepspeed", "zero2"), ("megatron", "zero1")):
        for tp, pp, cp, sp in ((1, 1, 1, False), (8, 1, 1, True), (8, 1, 1, False), (4, 2, 1, True), (2, 1, 2, True)):
            for nodes in (1, 2):
                for ckpt in ("none", "selective", "full"):
                    try:
                        req = EstimateRequest.model_validate({
                            "model": "llama-3.1-8b", "training": {"activation_checkpointing": ckpt},
                            "parallelism": {"framework": fw, "sharding": sh, "tp": tp, "pp": pp, "cp": cp,
                                            "sequence_parallel": sp},
                            "hardware": {"num_nodes": nodes}})
                        shape = shape_for(req.model)
                        layout = build_layout(job_of(req), shape)
                    except (ValidationError, InvalidRequestError):
                        continue
                    job = job_of(req)
                    memo, fresh = activation_rates(job, shape, layout), _activation_rates(job, shape, layout)
                    assert [getattr(memo, n) for n in names] == [getattr(fresh, n) for n in names], (fw, sh, tp, sp)
                    compared += 1
    assert compared >= 60


def test_activations_do_not_depend_on_an_earlier_lora_rank() -> None:
    """Regression: the activation rates' memo key left out the LoRA rank (the adapters' ``x A`` activations grow
    with it), so a rank-256 LoRA estimate answered with the activations of a rank-8 one asked before it on the
    same layout (57,038,340,096 instead of 57,948,504,064 bytes for Llama 3.1 8B at 8k tokens on one H100)."""
    from estimator import estimate
    from estimator.memo import clear_all

    def activations(rank: int) -> int:
        req = EstimateRequest.model_validate({
            "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm5-80gb"},
            "training": {"method": "lora", "lora_rank": rank, "seq_len": 8192, "activation_checkpointing": "none"}})
        return estimate(req).memory.breakdown_bytes.activations

    clear_all()
    fresh = activations(256)
    clear_all()
    activations(8)
    # issue 33: + the final norm's fp32 input and rsqrt beyond the residual stream, (2 x 4,096 + 4) B x 8,192 tokens
    assert activations(256) == fresh == 57_948_504_064 + (2 * 4096 + 4) * 8192
