"""Uneven pipeline stages (issue 14, item 3): placement as Megatron-LM and torchtitan do it, the busiest stage's
memory, the slowest stage's time, the split in ``layout``."""

from __future__ import annotations

import pytest

from estimator.errors import InvalidRequestError
from estimator.estimate import estimate
from estimator.request import EstimateRequest
from estimator.training.pipeline_split import split_layers


def test_llama3_405b_paper_split_removes_a_layer_from_first_and_last_stage() -> None:
    """Dubey et al. 2024 (arXiv 2407.21783) Sec. 3.3.2: 126 layers on PP 16, one layer fewer on the first and
    the last stage; Megatron-LM's account-for-embedding/loss split gives the same."""
    s = split_layers(126, 16, 1)
    assert s.kind == "weighted"
    assert s.stage_layers == (7, *([8] * 14), 7)


def test_even_split_is_kept_where_it_divides() -> None:
    s = split_layers(32, 4, 2)
    assert s.kind == "even" and s.chunk_layers == (4,) * 8 and s.stage_layers == (8,) * 4


def test_interleaved_uneven_chunks_map_to_ranks_round_robin() -> None:
    s = split_layers(126, 8, 8)  # 128 weighted layers over 64 chunks: 2 each, 1 on the first and the last chunk
    assert s.chunk_layers[0] == 1 and s.chunk_layers[-1] == 1 and set(s.chunk_layers[1:-1]) == {2}
    assert s.stage_layers == (15, 16, 16, 16, 16, 16, 16, 15)
    assert sum(s.stage_layers) == 126


def test_remainder_goes_to_the_first_chunks_as_torchtitan() -> None:
    s = split_layers(32, 3, 1)  # 34 weighted over 3: 12, 11, 11 -> minus embedding / loss
    assert s.stage_layers == (11, 11, 10) and sum(s.stage_layers) == 32


def test_given_first_and_last_stage_layers() -> None:
    s = split_layers(126, 16, 1, first=7, last=7)
    assert s.kind == "given" and s.stage_layers[0] == 7 and s.stage_layers[-1] == 7
    assert set(s.stage_layers[1:-1]) == {8}
    with pytest.raises(InvalidRequestError) as e:
        split_layers(126, 16, 2, first=6)
    assert e.value.field == "parallelism.first_stage_layers"
    with pytest.raises(InvalidRequestError):
        split_layers(126, 16, 1, first=5)  # 121 over 15 stages does not divide


def test_more_chunks_than_layers_is_refused() -> None:
    with pytest.raises(InvalidRequestError) as e:
        split_layers(32, 16, 4)
    assert e.value.field == "parallelism.pp"


def _req(pp: int, **par: object) -> EstimateRequest:
    return EstimateRequest.model_validate({
        "model": "llama-3.1-405b",
        "training": {"seq_len": 8192, "gradient_accumulation_steps": 16, "activation_checkpointing": "full"},
        "parallelism": {"tp": 8, "pp": pp, "sequence_parallel": True, "framework": "megatron", "sharding": "zero1",
                        **par},
        "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 2 * pp, "gpus_per_node": 8}})


def test_llama3_405b_layout_estimates_and_reports_its_split() -> None:
    r = estimate(_req(16))
    assert r.layout.stage_layers == [7, *([8] * 14), 7] and r.layout.pipeline_split == "weighted"
    assert r.time is not None and r.time.step_time_s > 0
    # the busiest rank holds 8 layers: rank 1 (middle) has more layers than the first stage and nearly as
    # many micro-batches in flight
    assert "second pipeline stage" in r.memory.busiest_rank


def test_slowest_stage_sets_the_step() -> None:
    """Moving layers onto the last stage (which also computes the LM head and loss) slows the step: the
    last stage becomes the slowest and paces the pipeline."""
    even = estimate(_req(16, first_stage_layers=7, last_stage_layers=7))
    heavy_last = estimate(_req(16, first_stage_layers=2, last_stage_layers=12))
    assert heavy_last.layout.stage_layers[-1] == 12
    assert heavy_last.time is not None and even.time is not None
    assert heavy_last.time.step_time_s > 1.3 * even.time.step_time_s
    assert heavy_last.memory.total_bytes != even.memory.total_bytes


def test_planner_offers_megatron_accounted_pipeline_splits() -> None:
    """The planner's pipeline degrees include those that split the layers once the embedding and the loss count
    as layers (Megatron-LM's accounted split): PP 16 and PP 8 x VP 8 for the 126-layer Llama 3.1 405B."""
    from estimator.planner.space import _splits, _vp_options

    assert _splits(126, 16) and not _splits(126, 5)
    assert _vp_options(126, 8) == (1, 8)
    assert _vp_options(80, 4) == (1, 5)
