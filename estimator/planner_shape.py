"""A :class:`~estimator.modelspec.ModelShape` whose derived sizes are computed once.

The planner calls the memory and step-time models thousands of times on one model; the parameter counts they
ask for (``attention_linears``, ``dense_layer_params`` ...) rebuild lists of :class:`Linear` on every call,
which is most of a memory estimate's time. This subclass memoises them per instance; the numbers are those of
the base class (it only caches).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from estimator.modelspec import Linear, ModelShape
from estimator.request import ModelArch

__all__ = ["CachedShape"]

T = TypeVar("T")


class CachedShape(ModelShape):
    """Same answers as :class:`ModelShape`, memoised per instance."""

    def __init__(self, arch: ModelArch) -> None:
        super().__init__(arch)
        self.__dict__["_memo"] = {}

    def _m(self, key: Any, compute: Callable[[], T]) -> T:
        memo: dict[Any, Any] = self.__dict__["_memo"]
        if key not in memo:
            memo[key] = compute()
        value: T = memo[key]
        return value

    def __hash__(self) -> int:
        """The dataclass hash (of the architecture's fields), computed once: shapes key many memos."""
        found: int | None = self.__dict__.get("_hash")
        if found is None:
            found = self.__dict__["_hash"] = ModelShape.__hash__(self)
        return found

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the cached hash (string hashes differ between processes)."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def attention_linears(self) -> list[Linear]:
        return list(self._m("attention_linears", super().attention_linears))

    def mlp_linears(self, ffn: int, count: int = 1, kind: str = "mlp") -> list[Linear]:
        return list(self._m(("mlp_linears", ffn, count, kind), lambda: super(CachedShape, self).mlp_linears(
            ffn, count, kind)))

    def attention_params(self) -> int:
        return self._m("attention_params", super().attention_params)

    def mlp_params(self, ffn: int) -> int:
        return self._m(("mlp_params", ffn), lambda: super(CachedShape, self).mlp_params(ffn))

    def norm_params_per_layer(self) -> int:
        return self._m("norm_params_per_layer", super().norm_params_per_layer)

    def routed_expert_params_per_layer(self) -> int:
        return self._m("routed", super().routed_expert_params_per_layer)

    def shared_expert_params_per_layer(self) -> int:
        return self._m("shared", super().shared_expert_params_per_layer)

    def router_params_per_layer(self) -> int:
        return self._m("router", super().router_params_per_layer)

    def dense_layer_params(self) -> int:
        return self._m("dense_layer_params", super().dense_layer_params)

    def moe_layer_params(self) -> int:
        return self._m("moe_layer_params", super().moe_layer_params)

    def embedding_params(self) -> int:
        return self._m("embedding_params", super().embedding_params)

    def lm_head_params(self) -> int:
        return self._m("lm_head_params", super().lm_head_params)

    def final_norm_params(self) -> int:
        return self._m("final_norm_params", super().final_norm_params)

    def layer_params_total(self) -> int:
        return self._m("layer_params_total", super().layer_params_total)

    def total_params(self) -> int:
        return self._m("total_params", super().total_params)

    def active_params(self) -> int:
        return self._m("active_params", super().active_params)

    def max_layer_params(self) -> int:
        return self._m("max_layer_params", super().max_layer_params)
