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
(none: a training choice)          seq_length: stated beside ``hf_config`` (or
                                   ``--set model.seq_length``), else the ``--plan``'s,
                                   else 4096, with a note saying so
tie_word_embeddings (False)        untie_embeddings_and_output_weights = not it
attention_dropout                  attention_dropout; hidden_dropout 0 (none in HF)
hidden_act silu (SwiGLU)           gated_linear_unit: true
Qwen3 q_norm / k_norm (by arch.)   qk_layernorm: true
=================================  =================================================

GPT-NeoX (``GPTNeoXForCausalLM``: GPT-NeoX-20B, Pythia) keeps its own keys for the MLP and
residual: a plain GELU MLP (``hidden_act`` gelu: ``gated_linear_unit: false``), biases on
every linear (``add_bias_linear: true``; ``attention_bias``, default true, is the QKV and
output projections'), full multi-head attention, untied embeddings, and
``use_parallel_residual`` (default true) -> ``use_parallel_residual``. Its ``rotary_pct``
(RoPE on a quarter of each head) is priced as RoPE on the whole head, and its LayerNorm as
the norm every layer has (a few HBM bytes an element either way).

MoE (Mixtral, Qwen2/3-MoE, DeepSeek-V3, GPT-OSS) maps to ``model.moe``:
``num_local_experts`` / ``num_experts`` / ``n_routed_experts`` -> ``num_experts``,
``num_experts_per_tok`` -> ``router_topk``, ``moe_intermediate_size`` ->
``ffn_hidden_size``, shared experts -> ``shared_expert_ffn_hidden_size``,
``first_k_dense_replace`` -> ``first_k_dense``, ``decoder_sparse_step`` ->
``layer_freq``, ``n_group`` / ``topk_group`` -> ``router_num_groups`` /
``router_group_topk`` (Megatron-Core group-limited routing, as Megatron-Bridge's
``model_bridge.py`` maps them; one group limits nothing and is left out). DeepSeek-V3's Multi-head
Latent Attention maps to Megatron-Core's MLA arguments (``multi_latent_attention``,
``q_lora_rank``, ``kv_lora_rank``, ``qk_head_dim``, ``qk_pos_emb_head_dim``,
``v_head_dim``) and its multi-token prediction to ``mtp_num_layers``.

Every mapped value is checked for its type: an integer field must be a JSON integer
(``4.0`` is taken as 4; ``4.9``, ``true``, a string, NaN, Infinity or an integer of more
than 4,000 digits is an error naming the key), never coerced. ``max_position_embeddings``
is the model's longest *context*, not the sequence length it is trained at (Qwen2.5-7B:
131,072), so it is never taken as ``seq_length``; a stated length above it gets a note.

Not represented, so ignored: attention biases (Qwen2: <0.1 % of FLOPs), sliding-window
attention (Mistral v0.1, GPT-OSS alternate layers: costed as full causal attention),
attention sinks. A key that would change the model's shape and has no mapping
(``mlp_only_layers`` of Qwen-MoE) is an error naming it; so is an unknown architecture.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Note
from .files import read_text

FIELD = "model.hf_config"
DEFAULT_SEQ_LENGTH = 4096  # the pre-training length of Llama 3, DeepSeek-V3, GPT-OSS
MAX_DIGITS = 4000  # below Python's int-from-text limit (4,300 digits)
_MISSING = object()


class HFNote(Note):
    """A visible default taken while mapping a config.json (the CLI prints it as a note)."""


class _Huge(str):
    """A JSON integer too long to convert; its repr says so instead of printing it."""

    def __repr__(self) -> str:
        return f"<an integer of {len(self)} digits>"


def _parse_int(text: str) -> int | _Huge:
    return int(text) if len(text) <= MAX_DIGITS else _Huge(text)


def _whole(key: str, value: Any, minimum: int) -> int:
    """``value`` as an int if it is one (4.0 counts), else a ConfigError naming ``key``."""
    field = f"{FIELD}.{key}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, value, f"must be an integer >= {minimum}, "
                          f"not a {'boolean' if isinstance(value, bool) else 'non-number'}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ConfigError(field, value, f"must be a whole number >= {minimum} "
                          "(not rounded silently)")
    if value < minimum:
        raise ConfigError(field, value, f"must be an integer >= {minimum}")
    return int(value)


class _Config:
    """A config.json dict whose values are read typed; missing or ill-typed keys are
    errors naming them."""

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

    def int(self, key: str, default: Any = _MISSING, minimum: int = 1) -> Any:
        """The integer at ``key`` (``default`` when absent or null; required without one)."""
        if default is _MISSING:
            return _whole(key, self.need(key), minimum)
        value = self.data.get(key)
        return default if value is None else _whole(key, value, minimum)

    def bool(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{FIELD}.{key}", value, "must be true or false")
        return value

    def fraction(self, key: str) -> float:
        value = self.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not 0.0 <= value <= 1.0:
            raise ConfigError(f"{FIELD}.{key}", value, "must be a number from 0 to 1")
        return float(value)


def _context(c: _Config) -> int | None:
    """The model's longest context (positions), for the seq_length note; None if absent."""
    return c.int("max_position_embeddings", None)


def _dense(c: _Config) -> dict[str, Any]:
    """The decoder shape every supported architecture shares (module docstring table)."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    act = c.get("hidden_act", "silu")
    if act not in ("silu", "swiglu"):
        raise ConfigError(f"{FIELD}.hidden_act", act, "only SwiGLU (silu) MLPs are mapped")
    _context(c)  # type-checked even though it is not the training length
    model: dict[str, Any] = {
        "num_layers": c.int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_query_groups": c.int("num_key_value_heads", heads),
        "ffn_hidden_size": c.int("intermediate_size"),
        "gated_linear_unit": True,
        "vocab_size": c.int("vocab_size"),
        "hidden_dropout": 0.0,
        "attention_dropout": c.fraction("attention_dropout"),
        "untie_embeddings_and_output_weights": not c.bool("tie_word_embeddings", False),
    }
    head_dim = c.int("head_dim", None)
    if head_dim is not None and head_dim * heads != hidden:
        model["kv_channels"] = head_dim
    return model


def _mixtral(c: _Config) -> dict[str, Any]:
    model = _dense(c)
    model["moe"] = {"num_experts": c.int("num_local_experts"),
                    "router_topk": c.int("num_experts_per_tok"),
                    "ffn_hidden_size": model["ffn_hidden_size"]}
    return model


def _qwen_moe(c: _Config) -> dict[str, Any]:
    if c.get("mlp_only_layers"):
        raise ConfigError(f"{FIELD}.mlp_only_layers", c.get("mlp_only_layers"),
                          "dense layers at arbitrary positions cannot be mapped; "
                          "only first_k_dense and layer_freq")
    model = _dense(c)
    model["moe"] = {"num_experts": c.int("num_experts"),
                    "router_topk": c.int("num_experts_per_tok"),
                    "ffn_hidden_size": c.int("moe_intermediate_size"),
                    "layer_freq": c.int("decoder_sparse_step", 1)}
    shared = c.int("shared_expert_intermediate_size", 0, minimum=0)
    if shared:
        model["moe"]["shared_expert_ffn_hidden_size"] = shared
    return model


def _qwen3(c: _Config) -> dict[str, Any]:
    """Qwen3 normalises every query and key head (``q_norm`` / ``k_norm`` in Transformers'
    ``modeling_qwen3.py``): Megatron-Core's ``qk_layernorm`` (Megatron-Bridge qwen3_bridge.py
    sets it)."""
    return {**_dense(c), "qk_layernorm": True}


def _qwen3_moe(c: _Config) -> dict[str, Any]:
    """As :func:`_qwen_moe`, with Qwen3's query / key norms (Megatron-Bridge
    qwen3_moe_bridge.py sets ``qk_layernorm``)."""
    return {**_qwen_moe(c), "qk_layernorm": True}


def _deepseek_v3(c: _Config) -> dict[str, Any]:
    model = _dense(c)
    model["num_query_groups"] = model["num_attention_heads"]  # MLA: no GQA groups
    model.update({
        "multi_latent_attention": True,
        "q_lora_rank": c.int("q_lora_rank", None),
        "kv_lora_rank": c.int("kv_lora_rank"),
        "qk_head_dim": c.int("qk_nope_head_dim"),
        "qk_pos_emb_head_dim": c.int("qk_rope_head_dim"),
        "v_head_dim": c.int("v_head_dim"),
        "mtp_num_layers": c.int("num_nextn_predict_layers", 0, minimum=0) or None,
    })
    expert = c.int("moe_intermediate_size")
    model["moe"] = {"num_experts": c.int("n_routed_experts"),
                    "router_topk": c.int("num_experts_per_tok"),
                    "ffn_hidden_size": expert,
                    "shared_expert_ffn_hidden_size":
                        expert * c.int("n_shared_experts", 0, minimum=0),
                    "first_k_dense": c.int("first_k_dense_replace", 0, minimum=0),
                    "layer_freq": c.int("moe_layer_freq", 1)}
    topk_group, n_group = c.int("topk_group", None), c.int("n_group", 1)
    if topk_group is not None and n_group > 1:
        model["moe"]["router_num_groups"] = n_group
        model["moe"]["router_group_topk"] = topk_group
    return {k: v for k, v in model.items() if v is not None}


def _gpt_oss(c: _Config) -> dict[str, Any]:
    model = _dense(c)
    per_token = c.int("num_experts_per_tok", None)
    model["moe"] = {"num_experts": c.int("num_local_experts"),
                    "router_topk": per_token if per_token is not None
                    else c.int("experts_per_token"),
                    "ffn_hidden_size": model["ffn_hidden_size"]}
    return model


def _gpt_neox(c: _Config) -> dict[str, Any]:
    """GPT-NeoX / Pythia (Transformers ``modeling_gpt_neox.py``, module docstring)."""
    act = c.get("hidden_act", "gelu")
    if act not in ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        raise ConfigError(f"{FIELD}.hidden_act", act, "only GELU MLPs are mapped for GPT-NeoX")
    _context(c)
    heads = c.int("num_attention_heads")
    return {
        "num_layers": c.int("num_hidden_layers"),
        "hidden_size": c.int("hidden_size"),
        "num_attention_heads": heads,
        "num_query_groups": heads,
        "ffn_hidden_size": c.int("intermediate_size"),
        "gated_linear_unit": False,
        "add_bias_linear": True,
        "vocab_size": c.int("vocab_size"),
        "hidden_dropout": c.fraction("hidden_dropout"),
        "attention_dropout": c.fraction("attention_dropout"),
        "untie_embeddings_and_output_weights": not c.bool("tie_word_embeddings", False),
        "use_parallel_residual": c.bool("use_parallel_residual", True),
    }


ARCHITECTURES: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "GPTNeoXForCausalLM": _gpt_neox,
    "LlamaForCausalLM": _dense,
    "MistralForCausalLM": _dense,
    "Qwen2ForCausalLM": _dense,
    "Qwen3ForCausalLM": _qwen3,
    "MixtralForCausalLM": _mixtral,
    "Qwen2MoeForCausalLM": _qwen_moe,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "DeepseekV3ForCausalLM": _deepseek_v3,
    "GptOssForCausalLM": _gpt_oss,
}


def model_from_hf(config: dict[str, Any], name: str = "model", seq_length: Any = None,
                  seq_from: str = "") -> dict[str, Any]:
    """The ``model`` section (a dict of Megatron names) for a parsed config.json.

    ``seq_length`` is the training sequence length (a config.json does not hold one);
    ``None`` takes :data:`DEFAULT_SEQ_LENGTH` with an :class:`HFNote` warning. ``seq_from``
    says where a given one came from, for the note when it exceeds the model's context.
    """
    if not isinstance(config, dict):
        raise ConfigError(FIELD, type(config).__name__, "a config.json must be a JSON object")
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise ConfigError(f"{FIELD}.architectures", archs,
                          f"cannot be mapped; supported: {', '.join(ARCHITECTURES)}")
    c = _Config(config, arch)
    model = {"name": name, **ARCHITECTURES[arch](c)}
    context = _context(c)
    if seq_length is None:
        seq_length = DEFAULT_SEQ_LENGTH if context is None else min(DEFAULT_SEQ_LENGTH, context)
        warnings.warn(HFNote(f"model.seq_length = {seq_length} (default; the config.json "
                             "holds no training length"
                             + (f", only the maximum context {context}" if context else "")
                             + "): set model.seq_length to train at another"), stacklevel=2)
    elif context is not None and isinstance(seq_length, int) and seq_length > context:
        warnings.warn(HFNote(f"model.seq_length = {seq_length}{seq_from} exceeds the model's "
                             f"maximum context (max_position_embeddings {context})"),
                      stacklevel=2)
    model["seq_length"] = seq_length
    return model


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """Parse a config.json (bounded size, UTF-8, JSON); ConfigError naming it otherwise.
    Integers longer than :data:`MAX_DIGITS` parse to a marker the mapping refuses by key."""
    text = read_text(Path(path), FIELD, str(path))
    try:
        return json.loads(text, parse_int=_parse_int)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise ConfigError(FIELD, str(path), f"is not valid JSON ({exc})") from None


def default_name(path: str | Path, config: dict[str, Any]) -> str:
    """``_name_or_path``'s last part, else the folder holding config.json, lower-case."""
    given = config.get("_name_or_path") if isinstance(config, dict) else None
    base = str(given).rstrip("/").rsplit("/", 1)[-1] if given else Path(path).resolve().parent.name
    return base.lower() or "model"


def load_hf_model(path: str | Path, name: str | None = None, seq_length: Any = None,
                  seq_from: str = "") -> dict[str, Any]:
    """The model section for the config.json at ``path`` (``seq_length``: as
    :func:`model_from_hf`)."""
    config = read_hf_config(path)
    return model_from_hf(config, name or default_name(path, config), seq_length, seq_from)


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
    mapped = load_hf_model(path, rest.get("name"), rest.get("seq_length"),
                           " (stated beside hf_config)")
    return {**data, "model": {**mapped, **rest}}
