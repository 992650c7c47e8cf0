"""The planner's screen: NumPy over whole arrays of candidate layouts, so that the exact memory model and the
step-time bound only see structures that may fit.

The screen is a filter that never changes the planner's answer. It only ever answers a question whose exact
answer it has proven, and it proves it with bounds that hold by construction rather than by copying a formula:

- **Memory floor.** For every structure, :func:`estimator.training.memory.memory_floor` gives (exactly, from the memory
  model's own model-state accounting) the bytes each phase of the first pipeline stage holds whatever the
  micro-batch and checkpointing (parameters, optimizer states, persistent gradient buckets), the gradients the
  ``backward-end`` phase adds, and the residual stream each decoder layer keeps per token (what full
  checkpointing stores; the other policies store more). :func:`need_floor` turns them, for whole arrays of
  (structure, micro-batch) layouts, into a lower bound on the memory need (``peak_allocated`` + the hard
  overhead, which is not negative): ``states + max(grads, layers x residual(tokens))``. A layout whose floor,
  with its safety margin, already exceeds the usable GPU memory cannot fit (:func:`may_fit` is ``False``), so
  :meth:`estimator.planner.search.SearchContext.fits` answers ``False`` without the exact estimate, and a
  structure whose lightest layout cannot fit is dropped before its step-time bound is even computed (the exact
  search would only have found that it does not fit). The floor does not depend on the checkpointing level, so
  one row decides a layout at every level.
``tests/test_planner_screen.py`` checks that both floors stay below the exact values on many random layouts (the
test that catches a step-time or memory model that changes under the screen) and that the planner's whole answer
is the same with and without the screen over many search spaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from estimator.training.memory import MemoryFloor

__all__ = ["Floors", "may_fit", "need_floor"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Floors:
    """The memory floors of a list of structures, one row each (:class:`estimator.training.memory.MemoryFloor`), and
    each structure's safety margin on the memory need (a fraction)."""

    states: IntArray
    grads: IntArray
    residual_per_token: IntArray
    residual_div: IntArray
    layers: IntArray
    cp: IntArray
    margin: FloatArray

    @classmethod
    def of(cls, floors: Sequence[MemoryFloor], margins: Sequence[float]) -> Floors:
        table = np.array([(f.states, f.grads, f.residual_bytes_per_token, f.residual_div, f.layers, f.cp)
                          for f in floors], dtype=np.int64).reshape(-1, 6)
        def col(j: int) -> IntArray:
            return np.ascontiguousarray(table[:, j])

        return cls(states=col(0), grads=col(1), residual_per_token=col(2), residual_div=col(3), layers=col(4),
                   cp=col(5), margin=np.asarray(margins, dtype=np.float64))

    def __len__(self) -> int:
        return int(self.states.shape[0])


def need_floor(floors: Floors, structure: IntArray, micro_batch: IntArray, seq_len: int) -> IntArray:
    """A lower bound on the memory need of each layout ``(structure[i], micro_batch[i])``, in bytes: the model
    states every phase holds plus the larger of the gradients (``backward-end``) and the residual stream each
    layer keeps (``forward``), with the activation model's own integer rounding
    (``estimator.training.activations.activation_model``)."""
    tokens = micro_batch * seq_len // floors.cp[structure]
    residual = floors.residual_per_token[structure] * tokens // floors.residual_div[structure]
    need: IntArray = floors.states[structure] + np.maximum(floors.grads[structure], floors.layers[structure] * residual)
    return need


def may_fit(floors: Floors, structure: IntArray, micro_batch: IntArray, seq_len: int, usable_bytes: float
            ) -> BoolArray:
    """``False`` where a layout cannot fit: its floor times (1 + its margin) is already above ``usable_bytes``
    (the GPU's capacity less the headroom kept free), the test ``SearchContext.fits`` applies to the exact need."""
    need = need_floor(floors, structure, micro_batch, seq_len).astype(np.float64)
    return np.asarray(need * (1.0 + floors.margin[structure]) <= usable_bytes, dtype=np.bool_)

