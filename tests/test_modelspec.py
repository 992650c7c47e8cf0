"""Parameter counts of every preset against the count its authors publish, and HF config.json parsing."""

import pytest

from estimator.errors import ModelConfigError, UnknownModelError
from estimator.model.spec import ModelShape, list_presets, parse_hf_config, preset, resolve_model
from estimator.request import HfConfigModel

# Published counts: each preset's `published_params` and `source` in estimator/data/model_presets.yaml
# (HF model cards / papers). Tolerance 0.5%: GPT-3's "175B" is a rounded figure (174.6B by its Table 2.1 shape).
PRESETS = [p["id"] for p in list_presets()]


@pytest.mark.parametrize("preset_id", PRESETS)
def test_parameter_count_matches_published(preset_id: str) -> None:
    arch = preset(preset_id)
    assert arch.published_params is not None
    total = ModelShape(arch).total_params()
    assert abs(total - arch.published_params) / arch.published_params < 0.005


@pytest.mark.parametrize(
    ("preset_id", "active_b"),
    [
        ("mixtral-8x7b", 12.9),  # Jiang et al. 2024: 12.9B active of 46.7B
        ("mixtral-8x22b", 39.1),  # Mistral AI: 39B active of 141B
        ("deepseek-v3", 37.5),  # DeepSeek-V3 report: 37B active (without MTP)
    ],
)
def test_moe_active_params(preset_id: str, active_b: float) -> None:
    active = ModelShape(preset(preset_id)).active_params() / 1e9
    assert abs(active - active_b) / active_b < 0.03


def test_required_presets_exist() -> None:
    required = {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b",
                "llama-3.1-70b", "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b",
                "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "gemma-2-9b", "gemma-2-27b", "deepseek-v3",
                "gpt-3-175b"}
    assert required <= set(PRESETS)


LLAMA_8B_CONFIG = {  # meta-llama/Llama-3.1-8B config.json (abridged to the fields that shape the model)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
}
QWEN_7B_CONFIG = {  # Qwen/Qwen2.5-7B config.json: q/k/v biases are implied by model_type qwen2
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False,
}
MIXTRAL_CONFIG = {  # mistralai/Mixtral-8x7B-v0.1 config.json
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
    "num_experts_per_tok": 2, "tie_word_embeddings": False,
}
GPT2_CONFIG = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
               "vocab_size": 50257}  # openai-community/gpt2: 124,439,808 parameters (HF model.num_parameters())


@pytest.mark.parametrize(
    ("config", "expected"),
    [(LLAMA_8B_CONFIG, 8030261248), (QWEN_7B_CONFIG, 7615616512), (MIXTRAL_CONFIG, 46702792704),
     (GPT2_CONFIG, 124439808)],
)
def test_hf_config_parameter_count(config: dict, expected: int) -> None:
    assert ModelShape(parse_hf_config(config)).total_params() == expected


def test_hf_config_missing_fields_is_a_clear_error() -> None:
    with pytest.raises(ModelConfigError, match="hidden_size") as info:
        resolve_model(HfConfigModel(hf_config={"model_type": "llama"}))
    assert info.value.field == "model.hf_config"


def test_unknown_preset_names_known_ones() -> None:
    with pytest.raises(UnknownModelError, match=r"llama-3.1-70b") as info:
        preset("llama-9-1t")
    assert info.value.field == "model"


LLAMA_NO_FFN = {k: v for k, v in LLAMA_8B_CONFIG.items() if k != "intermediate_size"}


@pytest.mark.parametrize(("config", "key"), [
    ({**LLAMA_8B_CONFIG, "text_config": [1]}, "text_config"),
    ({**LLAMA_8B_CONFIG, "text_config": "x"}, "text_config"),
    ({**MIXTRAL_CONFIG, "num_local_experts": "x"}, "num_local_experts"),
    ({**LLAMA_NO_FFN, "hidden_size": "abc"}, "hidden_size"),
    ({**LLAMA_8B_CONFIG, "hidden_size": True}, "hidden_size"),
    ({**LLAMA_8B_CONFIG, "hidden_size": 4096.5}, "hidden_size"),
    ({**LLAMA_8B_CONFIG, "hidden_size": 10**30}, "hidden_size"),
    ({**MIXTRAL_CONFIG, "num_experts_per_tok": "two"}, "num_experts_per_tok"),
    ({**MIXTRAL_CONFIG, "num_local_experts": float("nan")}, "num_local_experts"),
    ({**MIXTRAL_CONFIG, "moe_intermediate_size": 512, "shared_expert_intermediate_size": "q"},
     "shared_expert_intermediate_size"),
    ({**MIXTRAL_CONFIG, "first_k_dense_replace": "z"}, "first_k_dense_replace"),
    ({**GPT2_CONFIG, "n_positions": "p"}, "n_positions"),
    ({**LLAMA_8B_CONFIG, "tie_word_embeddings": "maybe"}, "tie_word_embeddings"),
    ({**LLAMA_8B_CONFIG, "final_logit_softcapping": "30"}, "final_logit_softcapping"),
    ({**LLAMA_8B_CONFIG, "sliding_window": [4096]}, "sliding_window"),
    ({**LLAMA_8B_CONFIG, "num_attention_heads": 33}, "num_key_value_heads"),
    ({**LLAMA_8B_CONFIG, "hidden_size": 4000, "num_key_value_heads": 16, "num_attention_heads": 48}, "hidden_size"),
])
def test_malformed_hf_config_is_a_model_error_naming_the_key(config: dict, key: str) -> None:
    """Every malformed entry is a one-line ModelConfigError at model.hf_config.<key> (it was a TypeError or
    ValueError traceback: CLI exit 1, HTTP 500)."""
    with pytest.raises(ModelConfigError) as info:
        resolve_model(HfConfigModel(hf_config=config))
    assert info.value.field == f"model.hf_config.{key}"
    assert key in info.value.message and "\n" not in info.value.message


def test_null_text_config_is_no_text_config() -> None:
    arch = parse_hf_config({**LLAMA_8B_CONFIG, "text_config": None})
    assert ModelShape(arch).total_params() == 8030261248


def test_text_config_fields_are_read() -> None:
    """Multimodal configs (Gemma 3, Llama 4) nest the language model under text_config."""
    arch = parse_hf_config({"model_type": "gemma3", "text_config": {**LLAMA_8B_CONFIG, "model_type": "gemma3_text"}})
    assert (arch.hidden_size, arch.num_layers) == (4096, 32)


def test_cached_shapes_of_one_architecture_are_equal_and_shared() -> None:
    """Memos keyed by a shape hit for another instance of the same model (compiled too, where the class would
    otherwise compare by identity), and requests for one model share one instance (estimator.model.spec.shape_for)."""
    from estimator.model.spec import CachedShape, shape_for

    a, b = CachedShape(preset("llama-3.1-70b")), CachedShape(preset("llama-3.1-70b"))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != CachedShape(preset("llama-3.1-8b"))
    assert shape_for("llama-3.1-70b") is shape_for("llama-3.1-70b") == a
    arch = preset("llama-3.1-8b")
    assert shape_for(arch) is shape_for(arch.model_copy())
    config = HfConfigModel(hf_config={"hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
                                      "intermediate_size": 1024, "vocab_size": 1000})
    assert shape_for(config) == shape_for(config)  # a pasted config (not hashable): a new, equal instance
