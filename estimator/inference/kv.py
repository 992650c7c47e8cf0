"""KV-cache bytes per token and per block, as the engines lay the cache out.

* Full attention with GQA (vLLM ``FullAttentionSpec.page_size_bytes`` = 2 x block_size x kv_heads x head_size
  x dtype bytes): K and V, one rank's kv_heads = max(1, num_kv_heads / tp) (heads are replicated when there
  are fewer than ranks).
* Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 Sec. 2.1.3; vLLM ``MLAAttentionSpec``): one
  latent vector of kv_lora_rank + qk_rope_head_dim per token and layer, no separate V, and the same on every TP
  rank (the latent is not split by heads).
* Sliding-window layers (Mistral, Gemma 2; vLLM ``SlidingWindowSpec``): a request holds at most
  window + one block of tokens per such layer.
* ``--kv-cache-dtype fp8`` (``fp8_e4m3`` / ``fp8_e5m2``): 1 byte an element; ``auto`` = the model dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from estimator.model.spec import ModelShape

__all__ = ["KvLayout", "kv_layout"]


@dataclass(frozen=True)
class KvLayout:
    """Per GPU: bytes one token adds in a full-attention layer and a sliding-window layer, and how many of
    each layer this GPU holds."""

    bytes_per_token_layer: int
    full_layers: int
    sliding_layers: int
    window: int | None
    dtype_bytes: int
    kv_heads_per_gpu: int
    element_per_token_layer: int
    mla: bool

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token of context adds over every layer on this GPU (sliding layers included)."""
        return self.bytes_per_token_layer * (self.full_layers + self.sliding_layers)

    def request_bytes(self, tokens: int, block_size: int) -> int:
        """Bytes one request of ``tokens`` holds, in whole blocks (paged: vLLM KVCacheManager)."""
        full_blocks = math.ceil(tokens / block_size)
        sliding_tokens = tokens if self.window is None else min(tokens, self.window + block_size)
        slide_blocks = math.ceil(sliding_tokens / block_size)
        per_block = self.bytes_per_token_layer * block_size
        return per_block * (full_blocks * self.full_layers + slide_blocks * self.sliding_layers)


def _dtype_bytes(kv_cache_dtype: str, weights: str) -> int:
    if kv_cache_dtype.startswith("fp8"):
        return 1
    return 2  # auto: the activation dtype (bf16 / fp16, also for fp8 / int weights)


def _sliding_layers(shape: ModelShape, override: int | None) -> int:
    a = shape.dims
    if a.sliding_window is None:
        return 0
    if override is not None:
        return min(override, a.num_layers)
    # Gemma 2 alternates sliding and global layers (transformers modeling_gemma2.py layer_types)
    if a.attn_logit_softcapping is not None or "gemma-2" in a.name.lower() or "gemma 2" in a.name.lower():
        return a.num_layers // 2
    return a.num_layers


def kv_layout(shape: ModelShape, kv_cache_dtype: str, weights: str, tp: int, pp: int = 1,
              sliding_override: int | None = None) -> KvLayout:
    a = shape.dims
    dt = _dtype_bytes(kv_cache_dtype, weights)
    layers = math.ceil(a.num_layers / pp)
    sliding_total = _sliding_layers(shape, sliding_override)
    sliding = math.ceil(sliding_total / pp) if sliding_total else 0
    sliding = min(sliding, layers)
    if shape.is_mla:
        elems = (a.kv_lora_rank or 512) + (a.qk_rope_head_dim or 64)
        heads = 1
    else:
        heads = max(1, shape.kv_heads // tp)
        elems = 2 * heads * shape.head_dim
    return KvLayout(bytes_per_token_layer=elems * dt, full_layers=layers - sliding, sliding_layers=sliding,
                    window=a.sliding_window if sliding else None, dtype_bytes=dt, kv_heads_per_gpu=heads,
                    element_per_token_layer=elems, mla=shape.is_mla)
