"""Whole-model parameter counts: total and active per token (elements, not bytes).

``total``: every weight of the main model, unsharded: embedding, decoder layers
(norms included), final norm and the output layer when untied. ``active``: the
weights one token's forward pass touches: a MoE layer counts its router, shared
expert and ``router_topk`` routed experts instead of all of them; the input
embedding counts (one row is read, but by convention of the DeepSeek-V3 and
Mixtral reports the table is part of the activated parameters). Multi-token
prediction modules are reported apart (``mtp``): DeepSeek-V3's 671 B total / 37 B
active exclude its 14 B MTP module (DeepSeek-AI 2024, arXiv 2412.19437, sec. 4.2
and the Hugging Face model card). Unpadded vocabulary; biases neglected.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.workload import Workload
from ..moe import is_moe_layer
from .mla import attention_params as mla_attention_params


@dataclass(frozen=True)
class ModelParams:
    """Parameters of the whole model: main model, per-token active, MTP modules."""

    total: float
    active: float
    mtp: float


def _attention(w: Workload) -> float:
    m = w.model
    if m.multi_latent_attention:
        return mla_attention_params(m, 1)
    a, g, d, h = m.num_attention_heads, m.groups, m.head_dim, m.hidden_size
    return h * (a + 2 * g) * d + a * d * h


def _mlp(w: Workload, ffn: int) -> float:
    return (3 if w.model.gated_linear_unit else 2) * w.model.hidden_size * ffn


def _layer(w: Workload, moe: bool) -> tuple[float, float]:
    """(total, active) of one decoder layer."""
    m = w.model
    base = _attention(w) + 4.0 * m.hidden_size
    if not (moe and m.moe is not None):
        full = base + _mlp(w, m.ffn)
        return full, full
    e = m.moe
    shared = base + m.hidden_size * e.num_experts + _mlp(w, e.shared_expert_ffn_hidden_size)
    expert = _mlp(w, e.ffn_hidden_size or m.ffn)
    return shared + e.num_experts * expert, shared + e.router_topk * expert


def model_params(w: Workload) -> ModelParams:
    """Total, active and MTP parameter counts of the workload's model."""
    m = w.model
    total = active = 0.0
    for kind in (False, True):
        n = sum(1 for i in range(m.num_layers)
                if (m.moe is not None and is_moe_layer(m.moe, i)) == kind)
        if n:
            t, a = _layer(w, kind)
            total, active = total + n * t, active + n * a
    emb = m.vocab_size * m.hidden_size
    head = emb if m.untie_embeddings_and_output_weights else 0.0
    total += emb + head + m.hidden_size
    active += emb + head + m.hidden_size
    mtp = 0.0
    if m.mtp_num_layers:
        t, _ = _layer(w, m.moe is not None and is_moe_layer(m.moe, m.num_layers - 1))
        mtp = m.mtp_num_layers * (t + 2.0 * m.hidden_size + 2.0 * m.hidden_size ** 2)
    return ModelParams(total=total, active=active, mtp=mtp)
