"""How the decoder layers are placed on pipeline stages: even, weighted for the embedding and the loss, or given.

Three ways, as the frameworks do them:

- **even** (``num_layers`` divisible by ``pp x v``, nothing given): ``num_layers / (pp v)`` layers in every
  model chunk (Megatron-LM's default; ``--num-layers-per-virtual-pipeline-stage``).
- **given** (``parallelism.first_stage_layers`` / ``last_stage_layers``): Megatron-LM's
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``; the other stages split the
  rest evenly, which must divide (``megatron/core/transformer/transformer_block.py`` ``get_num_layers_to_build``;
  Megatron asserts that no virtual pipeline is used with them, and so does this module).
- **weighted** (anything else): the embedding and the LM head + loss each weigh one decoder layer, as with
  Megatron-LM's ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split`` (the
  first chunk builds one layer fewer, the last chunk one fewer) and torchtitan's
  ``generate_llm_fqn_per_model_part(num_stages, num_layers, input_weight=1, output_weight=1)``
  (``torchtitan/distributed/pipeline_parallel.py``): ``L + 2`` weighted layers over ``pp x v`` chunks,
  ``(L + 2) // (pp v)`` each and one more on the first ``(L + 2) % (pp v)`` chunks, the embedding's and the
  loss's weight taken off the first and the last chunk. When ``L + 2`` divides evenly this is exactly Megatron's
  split: the Llama 3 405B layout (126 layers, PP 16; Dubey et al. 2024, arXiv 2407.21783, Sec. 3.3.2 "we
  remove one Transformer layer each from the first and the last stages") gives 7, 8 x 14, 7.

Model chunk ``c`` of the interleaved schedule runs on pipeline rank ``c mod pp`` (Narayanan et al. 2021,
arXiv 2104.04473, Sec. 2.2.2), so a rank holds chunks ``r, r + pp, ...``.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.errors import InvalidRequestError

__all__ = ["PipelineSplit", "split_layers"]


@dataclass(frozen=True)
class PipelineSplit:
    """Decoder layers per model chunk (``pp x v`` of them, in model order) and per pipeline rank."""

    kind: str  # even | weighted | given
    chunk_layers: tuple[int, ...]
    stage_layers: tuple[int, ...]  # per pipeline rank: the sum of its v chunks


def _per_rank(chunks: tuple[int, ...], pp: int) -> tuple[int, ...]:
    return tuple(sum(chunks[r::pp]) for r in range(pp))


def split_layers(num_layers: int, pp: int, vp: int, first: int | None = None,
                 last: int | None = None) -> PipelineSplit:
    """The placement of ``num_layers`` decoder layers on ``pp`` ranks of ``vp`` chunks each (module docstring).

    Raises :class:`InvalidRequestError` (naming the field) where no framework can place them."""
    chunks = pp * vp
    if chunks > num_layers:
        raise InvalidRequestError(f"pp x virtual_stages = {chunks} exceeds num_layers={num_layers}: every "
                                  "pipeline chunk needs at least one decoder layer", "parallelism.pp")
    if first is not None or last is not None:
        return _given(num_layers, pp, vp, first, last)
    if num_layers % chunks == 0:
        per = num_layers // chunks
        even = tuple(per for _ in range(chunks))
        return PipelineSplit("even", even, _per_rank(even, pp))
    weighted = num_layers + 2
    base, extra = divmod(weighted, chunks)
    sizes = [base + (1 if c < extra else 0) for c in range(chunks)]
    sizes[0] -= 1
    sizes[-1] -= 1
    return PipelineSplit("weighted", tuple(sizes), _per_rank(tuple(sizes), pp))


def _given(num_layers: int, pp: int, vp: int, first: int | None, last: int | None) -> PipelineSplit:
    field = "parallelism.first_stage_layers" if first is not None else "parallelism.last_stage_layers"
    if vp > 1:
        raise InvalidRequestError("first_stage_layers / last_stage_layers cannot be combined with virtual_stages > 1 "
                                  "(Megatron-LM asserts the same)", field)
    if pp < 2:
        raise InvalidRequestError("first_stage_layers / last_stage_layers need pp > 1", field)
    middle_stages = pp - (first is not None) - (last is not None)
    middle_layers = num_layers - (first or 0) - (last or 0)
    if middle_layers < 0 or (middle_stages == 0 and middle_layers != 0):
        raise InvalidRequestError(f"first_stage_layers + last_stage_layers must add up to num_layers={num_layers} "
                                  f"when pp={pp} has no other stage (and never exceed it)", field)
    if middle_stages and (middle_layers % middle_stages or middle_layers < middle_stages):
        raise InvalidRequestError(f"the other {middle_stages} stages must split the remaining {middle_layers} layers "
                                  "evenly, at least one each (Megatron-LM get_num_layers_to_build)", field)
    per = middle_layers // middle_stages if middle_stages else 0
    sizes = [per] * pp
    if first is not None:
        sizes[0] = first
    if last is not None:
        sizes[-1] = last
    return PipelineSplit("given", tuple(sizes), tuple(sizes))
