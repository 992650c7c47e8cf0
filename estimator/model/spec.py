"""Model shapes: presets, Hugging Face ``config.json`` parsing, parameter counts, and the memoised shape the
estimator and the planner run on (:class:`CachedShape`).

Parameter counts follow the module layout of Hugging Face ``transformers`` (``modeling_llama.py``,
``modeling_mixtral.py``, ``modeling_deepseek_v3.py``, ``modeling_gpt2.py``): attention q/k/v/o projections,
a gated (SwiGLU, three matrices) or plain (two matrices) MLP, RMSNorm/LayerNorm weights, token embeddings and
an LM head unless tied. Multi-head latent attention follows DeepSeek-V2 (arXiv 2405.04434) Sec. 2.1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Final, TypeVar

import yaml
from pydantic import ValidationError

from estimator.errors import ModelConfigError, UnknownModelError
from estimator.request import HfConfigModel, ModelArch, ModelInput

__all__ = ["CachedShape", "Linear", "ModelShape", "list_presets", "parse_hf_config", "preset", "resolve_model"]


@dataclass(frozen=True)
class Linear:
    """One weight matrix ``[in_features, out_features]``; ``count`` copies per layer."""

    name: str
    in_features: int
    out_features: int
    count: int = 1
    kind: str = "attention"  # attention | mlp | expert

    @property
    def params(self) -> int:
        return self.in_features * self.out_features * self.count


@cache
def _presets() -> dict[str, dict[str, Any]]:
    text = resources.files("estimator").joinpath("data/model_presets.yaml").read_text()
    data: dict[str, dict[str, Any]] = yaml.safe_load(text)
    return data


def list_presets() -> list[dict[str, Any]]:
    """Preset ids with their display names and published parameter counts."""
    return [
        {"id": k, "name": v["name"], "published_params": v.get("published_params"), "source": v["source"]}
        for k, v in _presets().items()
    ]


def preset(preset_id: str) -> ModelArch:
    data = _presets().get(preset_id.lower())
    if data is None:
        known = ", ".join(sorted(_presets()))
        raise UnknownModelError(f"unknown model preset {preset_id!r}; known presets: {known}", "model")
    return ModelArch(**data)


def resolve_model(model: ModelInput) -> ModelArch:
    """A preset id, a pasted HF config or an explicit shape, as a :class:`ModelArch`."""
    if isinstance(model, str):
        return preset(model)
    if isinstance(model, HfConfigModel):
        return parse_hf_config(model.hf_config)
    return model


class _Config:
    """A pasted ``config.json`` read key by key: every value is checked for its type, and every error names
    the key it came from (``model.hf_config.<key>``), so a malformed config is a 422 / exit 2, never a 500."""

    def __init__(self, cfg: Any) -> None:
        if not isinstance(cfg, dict):
            raise ModelConfigError("config.json must be a JSON object", "model.hf_config")
        text = cfg.get("text_config")
        if text is not None and not isinstance(text, dict):
            raise ModelConfigError("config.json: text_config must be an object", "model.hf_config.text_config")
        self.cfg: dict[str, Any] = {**(text or {}), **{k: v for k, v in cfg.items() if k != "text_config"}}
        self.source: dict[str, str] = {}  # ModelArch field -> the config.json key it was read from

    def key_of(self, *keys: str) -> str | None:
        return next((k for k in keys if self.cfg.get(k) is not None), None)

    def raw(self, field: str, *keys: str) -> Any:
        key = self.key_of(*keys)
        if key is None:
            return None
        self.source.setdefault(field, key)
        return self.cfg[key]

    def int(self, field: str, *keys: str, default: int | None = None) -> int | None:
        key = self.key_of(*keys)
        if key is None:
            return default
        self.source.setdefault(field, key)
        return _as_int(key, self.cfg[key])

    def number(self, field: str, key: str) -> float | None:
        value = self.raw(field, key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ModelConfigError(f"config.json: {key} must be a finite number, not {_show(value)}",
                                   f"model.hf_config.{key}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ModelConfigError(f"config.json: {key} must be true or false, not {_show(value)}",
                                   f"model.hf_config.{key}")
        return value

    def field_path(self, field: str) -> str:
        key = self.source.get(field)
        return f"model.hf_config.{key}" if key else "model.hf_config"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _first_architecture(cfg: dict[str, Any]) -> str | None:
    """``architectures[0]`` of a config.json (``Qwen2ForCausalLM``): a better name than the ``model_type``."""
    archs = cfg.get("architectures")
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] else None


def _as_int(key: str, value: Any) -> int:
    """An integer-valued config entry: an int, an integral finite float, or a string of digits; never a bool."""
    bad = ModelConfigError(f"config.json: {key} must be an integer, not {_show(value)}", f"model.hf_config.{key}")
    if isinstance(value, bool):
        raise bad
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise bad
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise bad from None
    raise bad


_TIED_BY_DEFAULT: Final = {"gpt2", "gemma", "gemma2", "gemma3", "gemma3_text", "opt", "bloom", "gpt_neox_japanese"}
_QKV_BIAS: Final = {"qwen2", "qwen2_moe", "qwen2_vl"}
_LAYERNORM: Final = {"gpt2", "opt", "bloom", "gpt_neox", "falcon", "phi"}
# q_norm / k_norm on each head (transformers ``Qwen3Attention``, ``Gemma3Attention``, ``Olmo2Attention``)
_QK_NORM: Final = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2"}
# one qkv_proj and one gate_up_proj linear (transformers ``Phi3Attention`` / ``Phi3MLP``); GPT-NeoX's one
# ``query_key_value`` linear (``GPTNeoXAttention``; its MLP is not gated, so only the qkv part applies)
_FUSED_PROJECTIONS: Final = {"phi3", "gpt_neox"}
# attention and MLP read the same layer input (``GPTNeoXLayer``: ``use_parallel_residual``, default true; GPT-J
# always; Falcon ``parallel_attn``)
_PARALLEL_RESIDUAL_DEFAULT: Final = {"gpt_neox": True, "gptj": True, "falcon": True}
_NON_GATED: Final = {"gpt2", "opt", "bloom", "gpt_neox", "falcon", "phi", "starcoder2"}


def _hf_moe(c: _Config) -> dict[str, Any]:
    experts = c.int("num_experts", "num_local_experts", "n_routed_experts", "num_experts", default=1) or 1
    if experts <= 1:
        return {}
    moe_ffn = c.int("moe_ffn_hidden_size", "moe_intermediate_size")
    shared = c.int("num_shared_experts", "n_shared_experts", "num_shared_experts", default=0) or 0
    shared_size = c.int("num_shared_experts", "shared_expert_intermediate_size")
    if shared_size and moe_ffn:
        shared = max(1, round(shared_size / moe_ffn))
    return {
        "num_experts": experts,
        "experts_per_token": c.int("experts_per_token", "num_experts_per_tok", "moe_topk", default=2),
        "moe_ffn_hidden_size": moe_ffn,
        "num_shared_experts": shared,
        "first_dense_layers": c.int("first_dense_layers", "first_k_dense_replace", default=0) or 0,
    }


def _hf_mla(c: _Config) -> dict[str, Any]:
    if not c.cfg.get("kv_lora_rank"):
        return {}
    keys = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    return {k: c.int(k, k) for k in keys}


def _hf_fields(c: _Config) -> dict[str, Any]:
    model_type = str(c.cfg.get("model_type", "")).lower()
    hidden = c.int("hidden_size", "hidden_size", "n_embd", "d_model")
    heads = c.int("num_attention_heads", "num_attention_heads", "n_head", "num_heads")
    layers = c.int("num_layers", "num_hidden_layers", "n_layer", "num_layers")
    vocab = c.int("vocab_size", "vocab_size")
    missing = [n for n, v in (("hidden_size", hidden), ("num_attention_heads", heads),
                              ("num_hidden_layers", layers), ("vocab_size", vocab)) if v is None]
    if missing:
        raise ModelConfigError(f"config.json lacks {', '.join(missing)}", "model.hf_config")
    assert hidden is not None
    ffn = c.int("ffn_hidden_size", "intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
    window = c.int("sliding_window", "sliding_window") if c.flag("use_sliding_window", True) else None
    fields: dict[str, Any] = {
        "name": str(c.raw("name", "_name_or_path", "name") or _first_architecture(c.cfg) or model_type
                    or "hf-config")[:200],
        "num_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
        "num_kv_heads": c.int("num_kv_heads", "num_key_value_heads", "num_kv_heads", default=heads),
        "head_dim": c.int("head_dim", "head_dim"), "ffn_hidden_size": ffn, "vocab_size": vocab,
        "tied_embeddings": c.flag("tie_word_embeddings", model_type in _TIED_BY_DEFAULT),
        "qkv_bias": c.flag("attention_bias", False) or model_type in _QKV_BIAS or model_type == "gpt2",
        "attention_bias": c.flag("attention_bias", False) or model_type == "gpt2",
        "mlp_bias": c.flag("mlp_bias", False) or model_type == "gpt2",
        "gated_mlp": model_type not in _NON_GATED,
        "norm": "layernorm" if model_type in _LAYERNORM else "rmsnorm",
        "norms_per_layer": 4 if model_type.startswith("gemma2") or model_type.startswith("gemma3") else 2,
        "norm_fp32_scale": model_type.startswith("gemma"),  # GemmaRMSNorm: output * (1.0 + weight.float())
        "fused_projections": model_type in _FUSED_PROJECTIONS,
        "parallel_residual": (c.flag("use_parallel_residual", _PARALLEL_RESIDUAL_DEFAULT.get(model_type, False))
                              if model_type != "falcon" else c.flag("parallel_attn", True)),
        "qk_norm": model_type in _QK_NORM or c.flag("use_qk_norm", False),
        "learned_position_embeddings": (c.int("learned_position_embeddings", "n_positions", default=0)
                                        if model_type == "gpt2" else 0),
        "final_logit_softcapping": c.number("final_logit_softcapping", "final_logit_softcapping"),
        "attn_logit_softcapping": c.number("attn_logit_softcapping", "attn_logit_softcapping"),
        "sliding_window": window,
        **_hf_moe(c), **_hf_mla(c),
    }
    return fields


def parse_hf_config(cfg: dict[str, Any]) -> ModelArch:
    """Read a Hugging Face ``config.json`` (Llama, Mistral, Mixtral, Qwen2, Gemma 2, DeepSeek-V3, GPT-2 …).

    Every malformed entry is a :class:`ModelConfigError` naming its key (``model.hf_config.<key>``)."""
    c = _Config(cfg)
    fields = _hf_fields(c)
    try:
        return ModelArch(**fields)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = [str(p) for p in err.get("loc", ())]
        field = loc[0] if loc else ""
        key = c.source.get(field, field)
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        where = f"{key}: " if key else ""
        raise ModelConfigError(f"config.json is not a model the estimator can read: {where}{msg}",
                               c.field_path(field) if field else "model.hf_config") from exc


class ArchDims:
    """A :class:`ModelArch`'s fields as compiled attributes (read on every estimate: a pydantic attribute read is
    about 360 machine instructions from compiled code, see :mod:`estimator.job`)."""

    name: Final[str]
    num_layers: Final[int]
    hidden_size: Final[int]
    num_attention_heads: Final[int]
    num_kv_heads: Final[int | None]
    head_dim: Final[int | None]
    ffn_hidden_size: Final[int]
    vocab_size: Final[int]
    tied_embeddings: Final[bool]
    num_experts: Final[int]
    experts_per_token: Final[int]
    moe_ffn_hidden_size: Final[int | None]
    num_shared_experts: Final[int]
    first_dense_layers: Final[int]
    gated_mlp: Final[bool]
    attention_bias: Final[bool]
    qkv_bias: Final[bool]
    mlp_bias: Final[bool]
    norm: Final[str]
    q_lora_rank: Final[int | None]
    kv_lora_rank: Final[int | None]
    qk_rope_head_dim: Final[int | None]
    qk_nope_head_dim: Final[int | None]
    v_head_dim: Final[int | None]
    sliding_window: Final[int | None]
    norms_per_layer: Final[int]
    norm_fp32_scale: Final[bool]
    fused_projections: Final[bool]
    parallel_residual: Final[bool]
    qk_norm: Final[bool]
    final_logit_softcapping: Final[float | None]
    attn_logit_softcapping: Final[float | None]
    learned_position_embeddings: Final[int]
    source: Final[str]
    published_params: Final[int | None]

    def __init__(self, d: dict[str, Any]) -> None:
        self.name = d["name"]
        self.num_layers = d["num_layers"]
        self.hidden_size = d["hidden_size"]
        self.num_attention_heads = d["num_attention_heads"]
        self.num_kv_heads = d["num_kv_heads"]
        self.head_dim = d["head_dim"]
        self.ffn_hidden_size = d["ffn_hidden_size"]
        self.vocab_size = d["vocab_size"]
        self.tied_embeddings = d["tied_embeddings"]
        self.num_experts = d["num_experts"]
        self.experts_per_token = d["experts_per_token"]
        self.moe_ffn_hidden_size = d["moe_ffn_hidden_size"]
        self.num_shared_experts = d["num_shared_experts"]
        self.first_dense_layers = d["first_dense_layers"]
        self.gated_mlp = d["gated_mlp"]
        self.attention_bias = d["attention_bias"]
        self.qkv_bias = d["qkv_bias"]
        self.mlp_bias = d["mlp_bias"]
        self.norm = d["norm"]
        self.q_lora_rank = d["q_lora_rank"]
        self.kv_lora_rank = d["kv_lora_rank"]
        self.qk_rope_head_dim = d["qk_rope_head_dim"]
        self.qk_nope_head_dim = d["qk_nope_head_dim"]
        self.v_head_dim = d["v_head_dim"]
        self.sliding_window = d["sliding_window"]
        self.norms_per_layer = d["norms_per_layer"]
        self.norm_fp32_scale = d["norm_fp32_scale"]
        self.fused_projections = d["fused_projections"]
        self.parallel_residual = d["parallel_residual"]
        self.qk_norm = d["qk_norm"]
        self.final_logit_softcapping = d["final_logit_softcapping"]
        self.attn_logit_softcapping = d["attn_logit_softcapping"]
        self.learned_position_embeddings = d["learned_position_embeddings"]
        self.source = d["source"]
        self.published_params = d["published_params"]


@dataclass(frozen=True)
class ModelShape:
    """Derived sizes of a :class:`ModelArch`; all counts are parameters (elements), not bytes. ``dims``: the
    architecture's fields as compiled attributes (what the sizes below and the models read)."""

    arch: ModelArch
    dims: ArchDims = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", ArchDims(vars(self.arch)))

    def __reduce__(self) -> tuple[type[ModelShape], tuple[ModelArch]]:
        """Pickled as its architecture (``dims`` is rebuilt from it)."""
        return type(self), (self.arch,)

    @property
    def kv_heads(self) -> int:
        return self.dims.num_kv_heads or self.dims.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.dims.head_dim or self.dims.hidden_size // self.dims.num_attention_heads

    @property
    def is_mla(self) -> bool:
        return self.dims.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.dims.num_experts > 1

    @property
    def moe_layers(self) -> int:
        return self.dims.num_layers - self.dims.first_dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.dims.num_layers - self.moe_layers

    @property
    def expert_ffn(self) -> int:
        return self.dims.moe_ffn_hidden_size or self.dims.ffn_hidden_size

    def attention_linears(self) -> list[Linear]:
        a, h = self.dims, self.dims.hidden_size
        if self.is_mla:
            return self._mla_linears()
        q, kv = a.num_attention_heads * self.head_dim, self.kv_heads * self.head_dim
        return [Linear("q_proj", h, q), Linear("k_proj", h, kv), Linear("v_proj", h, kv),
                Linear("o_proj", q, h)]

    def _mla_linears(self) -> list[Linear]:
        a, h, n = self.dims, self.dims.hidden_size, self.dims.num_attention_heads
        rope, nope, v = a.qk_rope_head_dim or 64, a.qk_nope_head_dim or 128, a.v_head_dim or 128
        kvr = a.kv_lora_rank or 512
        q = ([Linear("q_a_proj", h, a.q_lora_rank), Linear("q_b_proj", a.q_lora_rank, n * (nope + rope))]
             if a.q_lora_rank else [Linear("q_proj", h, n * (nope + rope))])
        return [*q, Linear("kv_a_proj_with_mqa", h, kvr + rope), Linear("kv_b_proj", kvr, n * (nope + v)),
                Linear("o_proj", n * v, h)]

    def mlp_linears(self, ffn: int, count: int = 1, kind: str = "mlp") -> list[Linear]:
        h = self.dims.hidden_size
        up = [Linear("gate_proj", h, ffn, count, kind)] if self.dims.gated_mlp else []
        return [*up, Linear("up_proj", h, ffn, count, kind), Linear("down_proj", ffn, h, count, kind)]

    def attention_params(self) -> int:
        a = self.dims
        weights = sum(lin.params for lin in self.attention_linears())
        q_out, kv_out = a.num_attention_heads * self.head_dim, self.kv_heads * self.head_dim
        bias = (q_out + 2 * kv_out) if a.qkv_bias and not self.is_mla else 0
        bias += a.hidden_size if a.attention_bias else 0
        mla_norms = (a.q_lora_rank or 0) + (a.kv_lora_rank or 0) if self.is_mla else 0
        return weights + bias + mla_norms

    def mlp_params(self, ffn: int) -> int:
        bias = (ffn * (2 if self.dims.gated_mlp else 1) + self.dims.hidden_size) if self.dims.mlp_bias else 0
        return sum(lin.params for lin in self.mlp_linears(ffn)) + bias

    def norm_params_per_layer(self) -> int:
        per_norm = self.dims.hidden_size * (2 if self.dims.norm == "layernorm" else 1)
        return self.dims.norms_per_layer * per_norm

    def routed_expert_params_per_layer(self) -> int:
        return self.dims.num_experts * self.mlp_params(self.expert_ffn) if self.is_moe else 0

    def shared_expert_params_per_layer(self) -> int:
        return self.dims.num_shared_experts * self.mlp_params(self.expert_ffn)

    def router_params_per_layer(self) -> int:
        return self.dims.hidden_size * self.dims.num_experts if self.is_moe else 0

    def dense_layer_params(self) -> int:
        return self.attention_params() + self.mlp_params(self.dims.ffn_hidden_size) + self.norm_params_per_layer()

    def moe_layer_params(self) -> int:
        return (self.attention_params() + self.norm_params_per_layer() + self.router_params_per_layer()
                + self.routed_expert_params_per_layer() + self.shared_expert_params_per_layer())

    def embedding_params(self) -> int:
        a = self.dims
        return a.vocab_size * a.hidden_size + a.learned_position_embeddings * a.hidden_size

    def lm_head_params(self) -> int:
        return 0 if self.dims.tied_embeddings else self.dims.vocab_size * self.dims.hidden_size

    def final_norm_params(self) -> int:
        return self.dims.hidden_size * (2 if self.dims.norm == "layernorm" else 1)

    def layer_params_total(self) -> int:
        return self.dense_layers * self.dense_layer_params() + self.moe_layers * self.moe_layer_params()

    def total_params(self) -> int:
        return self.layer_params_total() + self.embedding_params() + self.lm_head_params() + self.final_norm_params()

    def active_params(self) -> int:
        """Parameters touched per token: routed experts count ``experts_per_token`` of ``num_experts``."""
        if not self.is_moe:
            return self.total_params()
        idle = self.dims.num_experts - self.dims.experts_per_token
        return self.total_params() - self.moe_layers * idle * self.mlp_params(self.expert_ffn)

    def max_layer_params(self) -> int:
        return max(self.dense_layer_params() if self.dense_layers else 0,
                   self.moe_layer_params() if self.moe_layers else 0)

# ------------------------------------------------------------------------------------------ cached shape
# A ModelShape whose derived sizes are computed once. The planner calls the memory and step-time models
# thousands of times on one model; the parameter counts they ask for (``attention_linears``,
# ``dense_layer_params`` ...) rebuild lists of :class:`Linear` on every call, which is most of a memory
# estimate's time. This subclass memoises them per instance; the numbers are those of the base class.

T = TypeVar("T")


class CachedShape(ModelShape):
    """Same answers as :class:`ModelShape`, memoised per instance."""

    # the memo, the dataclass hash (of the architecture's fields, computed once: shapes key many memos) and the
    # sizes the models read most (each a few reads of the pydantic architecture) are plain attributes rather than
    # entries in ``__dict__``, so that the class also compiles as a native class
    _memo: dict[Any, Any]
    _hash: int
    _kv_heads: int
    _head_dim: int
    _is_mla: bool
    _is_moe: bool
    _moe_layers: int
    _expert_ffn: int

    def __init__(self, arch: ModelArch) -> None:
        super().__init__(arch)
        object.__setattr__(self, "_memo", {})
        object.__setattr__(self, "_hash", ModelShape.__hash__(self))
        plain = ModelShape(arch)
        object.__setattr__(self, "_kv_heads", plain.kv_heads)
        object.__setattr__(self, "_head_dim", plain.head_dim)
        object.__setattr__(self, "_is_mla", plain.is_mla)
        object.__setattr__(self, "_is_moe", plain.is_moe)
        object.__setattr__(self, "_moe_layers", plain.moe_layers)
        object.__setattr__(self, "_expert_ffn", plain.expert_ffn)

    def _m(self, key: Any, compute: Callable[[], T]) -> T:
        memo = self._memo
        if key not in memo:
            memo[key] = compute()
        value: T = memo[key]
        return value

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        """By architecture, as the dataclass compares: compiled (docs/native.md), the class would compare by
        identity and every memo keyed by a shape would miss for another instance of the same model."""
        if self is other:
            return True
        if not isinstance(other, CachedShape):
            return NotImplemented
        return self._hash == other._hash and self.arch == other.arch

    def __reduce__(self) -> tuple[type[CachedShape], tuple[ModelArch]]:
        """Pickled as its architecture (memo and hash are rebuilt: string hashes differ between processes)."""
        return CachedShape, (self.arch,)

    @property
    def kv_heads(self) -> int:
        return self._kv_heads

    @property
    def head_dim(self) -> int:
        return self._head_dim

    @property
    def is_mla(self) -> bool:
        return self._is_mla

    @property
    def is_moe(self) -> bool:
        return self._is_moe

    @property
    def moe_layers(self) -> int:
        return self._moe_layers

    @property
    def expert_ffn(self) -> int:
        return self._expert_ffn

    def attention_linears(self) -> list[Linear]:
        return list(self._m("attention_linears", super().attention_linears))

    def mlp_linears(self, ffn: int, count: int = 1, kind: str = "mlp") -> list[Linear]:
        return list(self._m(("mlp_linears", ffn, count, kind), lambda: ModelShape.mlp_linears(self, ffn, count,
                                                                                                    kind)))

    def attention_params(self) -> int:
        return self._m("attention_params", super().attention_params)

    def mlp_params(self, ffn: int) -> int:
        return self._m(("mlp_params", ffn), lambda: ModelShape.mlp_params(self, ffn))

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


@lru_cache(maxsize=64)
def _shape_of(model: Any) -> CachedShape:
    return CachedShape(resolve_model(model))


def shape_for(model: Any) -> CachedShape:
    """The :class:`CachedShape` of a request's model: one instance per preset id or explicit architecture (their
    memos and every memo keyed by the shape are shared across requests); a pasted HF config (a dict, not
    hashable) gets a new one."""
    try:
        return _shape_of(model)
    except TypeError:
        return CachedShape(resolve_model(model))


def clear_shapes() -> None:
    """Forget the shared shapes (and their memos): the next request of each model builds its shape afresh."""
    _shape_of.cache_clear()
