"""Multi-head latent attention (MLA, DeepSeek-V2 / V3) as ops and parameter counts.

MLA (DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1; Megatron-Core ``MLASelfAttention``)
compresses queries and keys/values through low-rank latents:

* query: ``h -> q_lora_rank`` (down, replicated over TP), RMSNorm, ``q_lora_rank ->
  a * (qk_head_dim + qk_pos_emb_head_dim)`` (up, column-parallel); without
  ``q_lora_rank`` one column-parallel ``h -> a * (qk + rope)`` projection;
* key/value: ``h -> kv_lora_rank + qk_pos_emb_head_dim`` (down, replicated; the
  rope part is the one shared decoupled key), RMSNorm, ``kv_lora_rank -> a *
  (qk_head_dim + v_head_dim)`` (up, column-parallel);
* attention over heads of query/key size ``qk + rope`` and value size ``v``:
  ``2 * s_q * s_k * a * (qk + rope + v)`` FLOPs for the full square;
* output projection ``a * v_head_dim -> h`` (row-parallel).

Under TP the heads split ``a / t`` and the down projections are replicated
(Megatron-Core builds them ``parallel_mode="duplicated"``). Under CP the key/value
exchange carries ``a * (qk + rope + v)`` elements per token (handled by the
attention cost like MHA's ``2 * a * d``). Units: elements and FLOPs.
"""

from __future__ import annotations

from ..config.workload import ModelConfig


def qk_dim(m: ModelConfig) -> int:
    """Query/key head size with the decoupled rope part (DeepSeek-V3: 128 + 64)."""
    return (m.qk_head_dim or 0) + (m.qk_pos_emb_head_dim or 0)


def attention_params(m: ModelConfig, tp: int = 1) -> float:
    """MLA weights of one layer on one TP rank (norm weights included), elements.

    Replicated: q/kv down projections and their RMSNorms; split over TP: q/kv up
    projections and the output projection. DeepSeek-V3 (h 7168, a 128, q_lora 1536,
    kv_lora 512, qk 128, rope 64, v 128): 187.1 M per layer at TP 1.
    """
    h, a = m.hidden_size, m.num_attention_heads
    kv_lora, rope, v = m.kv_lora_rank or 0, m.qk_pos_emb_head_dim or 0, m.v_head_dim or 0
    qk = m.qk_head_dim or 0
    if m.q_lora_rank:
        q_rep = h * m.q_lora_rank + m.q_lora_rank
        q_split = m.q_lora_rank * a * (qk + rope)
    else:
        q_rep, q_split = 0, h * a * (qk + rope)
    kv_rep = h * (kv_lora + rope) + kv_lora
    kv_split = kv_lora * a * (qk + v)
    out = a * v * h
    return q_rep + kv_rep + (q_split + kv_split + out) / tp


def core_flops(m: ModelConfig, q_tokens: float, s: int, heads: float) -> float:
    """Full-square attention FLOPs (before the causal half): QK^T and PV, FLOPs."""
    return 2.0 * q_tokens * s * heads * (qk_dim(m) + (m.v_head_dim or 0))
