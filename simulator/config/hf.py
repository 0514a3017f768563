"""A model section from a Hugging Face ``config.json`` (Transformers config keys -> Megatron names).

``model: {hf_config: path/to/config.json}`` in a workload YAML, or
``clustersim workload --from-hf config.json``, reads the checkpoint's config
and maps it to this project's Megatron-Core names; keys written beside
``hf_config`` override what was mapped (``name``, ``seq_length``...).

Shared by every supported architecture (``architectures[0]``):

=================================  =================================================
HF key                             model field
=================================  =================================================
num_hidden_layers                  num_layers
hidden_size                        hidden_size
num_attention_heads                num_attention_heads
num_key_value_heads                num_query_groups (GQA)
head_dim (if not hidden/heads)     kv_channels
intermediate_size                  ffn_hidden_size (dense layers)
vocab_size                         vocab_size
max_position_embeddings            seq_length (``rope_scaling.original_max_position_
                                   embeddings`` when the context was extended by RoPE
                                   scaling: the length pre-training ran at)
tie_word_embeddings (False)        untie_embeddings_and_output_weights = not it
attention_dropout                  attention_dropout; hidden_dropout 0 (none in HF)
hidden_act silu (SwiGLU)           gated_linear_unit: true
=================================  =================================================

MoE (Mixtral, Qwen2/3-MoE, DeepSeek-V3, GPT-OSS) maps to ``model.moe``:
``num_local_experts`` / ``num_experts`` / ``n_routed_experts`` -> ``num_experts``,
``num_experts_per_tok`` -> ``router_topk``, ``moe_intermediate_size`` ->
``ffn_hidden_size``, shared experts -> ``shared_expert_ffn_hidden_size``,
``first_k_dense_replace`` -> ``first_k_dense``, ``decoder_sparse_step`` ->
``layer_freq``, ``topk_group`` -> ``max_nodes_per_token``. DeepSeek-V3's Multi-head
Latent Attention maps to Megatron-Core's MLA arguments (``multi_latent_attention``,
``q_lora_rank``, ``kv_lora_rank``, ``qk_head_dim``, ``qk_pos_emb_head_dim``,
``v_head_dim``) and its multi-token prediction to ``mtp_num_layers``.

Not represented, so ignored: attention biases (Qwen2: <0.1 % of FLOPs), sliding-window
attention (Mistral v0.1, GPT-OSS alternate layers: costed as full causal attention),
attention sinks. A key that would change the model's shape and has no mapping
(``mlp_only_layers`` of Qwen-MoE) is an error naming it; so is an unknown architecture.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .files import read_text

FIELD = "model.hf_config"


class _Config:
    """A config.json dict whose missing keys are errors naming them."""

    def __init__(self, data: dict[str, Any], arch: str):
        self.data, self.arch = data, arch

    def need(self, key: str) -> Any:
        if self.data.get(key) is None:
            raise ConfigError(f"{FIELD}.{key}", None,
                              f"is required to map a {self.arch} config but missing")
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value


def _seq_length(c: _Config) -> int:
    scaling = c.get("rope_scaling") or {}
    original = scaling.get("original_max_position_embeddings") if isinstance(scaling, dict) \
        else None
    return int(original or c.need("max_position_embeddings"))


def _dense(c: _Config) -> dict[str, Any]:
    """The decoder shape every supported architecture shares (module docstring table)."""
    hidden, heads = int(c.need("hidden_size")), int(c.need("num_attention_heads"))
    act = c.get("hidden_act", "silu")
    if act not in ("silu", "swiglu"):
        raise ConfigError(f"{FIELD}.hidden_act", act, "only SwiGLU (silu) MLPs are mapped")
    model: dict[str, Any] = {
        "num_layers": int(c.need("num_hidden_layers")),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_query_groups": int(c.get("num_key_value_heads", heads)),
        "ffn_hidden_size": int(c.need("intermediate_size")),
        "gated_linear_unit": True,
        "vocab_size": int(c.need("vocab_size")),
        "hidden_dropout": 0.0,
        "attention_dropout": float(c.get("attention_dropout", 0.0)),
        "seq_length": _seq_length(c),
        "untie_embeddings_and_output_weights": not c.get("tie_word_embeddings", False),
    }
    head_dim = c.get("head_dim")
    if head_dim is not None and int(head_dim) * heads != hidden:
        model["kv_channels"] = int(head_dim)
    return model


def _mixtral(c: _Config) -> dict[str, Any]:
    model = _dense(c)
    model["moe"] = {"num_experts": int(c.need("num_local_experts")),
                    "router_topk": int(c.need("num_experts_per_tok")),
                    "ffn_hidden_size": model["ffn_hidden_size"]}
    return model


def _qwen_moe(c: _Config) -> dict[str, Any]:
    if c.get("mlp_only_layers"):
        raise ConfigError(f"{FIELD}.mlp_only_layers", c.get("mlp_only_layers"),
                          "dense layers at arbitrary positions cannot be mapped; "
                          "only first_k_dense and layer_freq")
    model = _dense(c)
    model["moe"] = {"num_experts": int(c.need("num_experts")),
                    "router_topk": int(c.need("num_experts_per_tok")),
                    "ffn_hidden_size": int(c.need("moe_intermediate_size")),
                    "layer_freq": int(c.get("decoder_sparse_step", 1))}
    shared = int(c.get("shared_expert_intermediate_size", 0))
    if shared:
        model["moe"]["shared_expert_ffn_hidden_size"] = shared
    return model


def _deepseek_v3(c: _Config) -> dict[str, Any]:
    model = _dense(c)
    model["num_query_groups"] = model["num_attention_heads"]  # MLA: no GQA groups
    model.update({
        "multi_latent_attention": True,
        "q_lora_rank": c.get("q_lora_rank"),
        "kv_lora_rank": int(c.need("kv_lora_rank")),
        "qk_head_dim": int(c.need("qk_nope_head_dim")),
        "qk_pos_emb_head_dim": int(c.need("qk_rope_head_dim")),
        "v_head_dim": int(c.need("v_head_dim")),
        "mtp_num_layers": int(c.get("num_nextn_predict_layers", 0)) or None,
    })
    expert = int(c.need("moe_intermediate_size"))
    model["moe"] = {"num_experts": int(c.need("n_routed_experts")),
                    "router_topk": int(c.need("num_experts_per_tok")),
                    "ffn_hidden_size": expert,
                    "shared_expert_ffn_hidden_size": expert * int(c.get("n_shared_experts", 0)),
                    "first_k_dense": int(c.get("first_k_dense_replace", 0)),
                    "layer_freq": int(c.get("moe_layer_freq", 1))}
    if c.get("topk_group") is not None and int(c.get("n_group", 1)) > 1:
        model["moe"]["max_nodes_per_token"] = int(c.get("topk_group"))
    return {k: v for k, v in model.items() if v is not None}


def _gpt_oss(c: _Config) -> dict[str, Any]:
    model = _dense(c)
    model["moe"] = {"num_experts": int(c.need("num_local_experts")),
                    "router_topk": int(c.get("num_experts_per_tok")
                                       or c.need("experts_per_token")),
                    "ffn_hidden_size": model["ffn_hidden_size"]}
    return model


ARCHITECTURES: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "LlamaForCausalLM": _dense,
    "MistralForCausalLM": _dense,
    "Qwen2ForCausalLM": _dense,
    "Qwen3ForCausalLM": _dense,
    "MixtralForCausalLM": _mixtral,
    "Qwen2MoeForCausalLM": _qwen_moe,
    "Qwen3MoeForCausalLM": _qwen_moe,
    "DeepseekV3ForCausalLM": _deepseek_v3,
    "GptOssForCausalLM": _gpt_oss,
}


def model_from_hf(config: dict[str, Any], name: str = "model") -> dict[str, Any]:
    """The ``model`` section (a dict of Megatron names) for a parsed config.json."""
    if not isinstance(config, dict):
        raise ConfigError(FIELD, type(config).__name__, "a config.json must be a JSON object")
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if arch not in ARCHITECTURES:
        raise ConfigError(f"{FIELD}.architectures", archs,
                          f"cannot be mapped; supported: {', '.join(ARCHITECTURES)}")
    return {"name": name, **ARCHITECTURES[arch](_Config(config, arch))}


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """Parse a config.json (bounded size, UTF-8, JSON); ConfigError naming it otherwise."""
    text = read_text(Path(path), FIELD, str(path))
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(FIELD, str(path), f"is not valid JSON ({exc})") from None


def default_name(path: str | Path, config: dict[str, Any]) -> str:
    """``_name_or_path``'s last part, else the folder holding config.json, lower-case."""
    given = config.get("_name_or_path") if isinstance(config, dict) else None
    base = str(given).rstrip("/").rsplit("/", 1)[-1] if given else Path(path).resolve().parent.name
    return base.lower() or "model"


def load_hf_model(path: str | Path, name: str | None = None) -> dict[str, Any]:
    """The model section for the config.json at ``path``."""
    config = read_hf_config(path)
    return model_from_hf(config, name or default_name(path, config))


def expand_hf_config(data: dict[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """Replace ``model.hf_config`` by the mapped fields; keys beside it win.

    A relative path is taken from ``base_dir`` (the YAML file's folder), else
    from the working directory.
    """
    model = data.get("model")
    if not isinstance(model, dict) or "hf_config" not in model:
        return data
    ref = model["hf_config"]
    if not isinstance(ref, str | Path):
        raise ConfigError(FIELD, ref, "must be the path of a Hugging Face config.json")
    path = Path(ref)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    rest = {k: v for k, v in model.items() if k != "hf_config"}
    mapped = load_hf_model(path, rest.get("name"))
    return {**data, "model": {**mapped, **rest}}
