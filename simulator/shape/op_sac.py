"""torchtitan's per-op selective activation checkpointing, as the GEMMs it saves.

torchtitan (``[activation_checkpoint] mode = "selective"``, ``selective_ac_option = "op"``,
its Llama preset's default) wraps every transformer block in a checkpoint whose policy
(pytorch/torchtitan 0da8901b1, ``torchtitan/models/llama/parallelize_llama.py``,
``_apply_ac_to_transformer_block`` and ``_save_list``) keeps the outputs of

* ``aten.mm``, except every second one, counted per block in forward order;
* the flash and memory-efficient SDPA kernels (the attention output and its log-sum-exp);
* ``_c10d_functional.reduce_scatter_tensor`` (the sequence-parallel TP reduction);
* ``aten.max`` (the float8 amax);

and recomputes everything else before the block's backward: the other GEMMs, the norms,
RoPE, the activation, the residual adds, the float8 casts and the TP all-gathers.

A Llama block runs its GEMMs in the order wq, wk, wv, wo, w1, w3, w2 (torchtitan
``models/llama/model.py``: ``Attention.forward``; ``FeedForward.forward`` computes
``w2(F.silu(w1(x)) * w3(x))``), so wq, wv, w1 and w2 are kept and wk, wo and w3 rerun;
without a gated MLP (w1, w2 only) w1 is kept and w2 reruns. Under float8 the linears still
dispatch ``aten.mm`` on float8 tensors (torchao ``Float8Tensor``), which the policy's
dispatch mode sees first, so the count is the same.

Each GEMM is named after the fused op of :func:`simulator.workload.ops.layer_forward` it is
part of (``qkv``, ``attn_proj``, ``fc1``, ``fc2``). Sizes are per GPU: ``n`` output and
``k`` reduction features of one token.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.workload import ModelConfig


@dataclass(frozen=True)
class BlockMm:
    """One ``aten.mm`` of a block: torchtitan's ``name``, the fused op it belongs to here,
    its per-GPU output (``n``) and reduction (``k``) widths, and whether the policy keeps
    its output (odd positions, 1-based, in forward order)."""

    name: str
    fused: str
    n: float
    k: float
    saved: bool


def block_mms(h: float, q: float, kv: float, v_out: float, ffn: float,
              glu: bool) -> list[BlockMm]:
    """The block's GEMMs in forward order, per GPU: hidden ``h``, query heads x head dim
    ``q``, key (= value) heads x head dim ``kv``, attention output width ``v_out`` (the
    output projection's input), MLP width ``ffn`` (each of w1 and w3 under a GLU)."""
    mms = [("wq", "qkv", q, h), ("wk", "qkv", kv, h), ("wv", "qkv", kv, h),
           ("wo", "attn_proj", h, v_out), ("w1", "fc1", ffn, h)]
    if glu:
        mms.append(("w3", "fc1", ffn, h))
    mms.append(("w2", "fc2", h, ffn))
    return [BlockMm(name, fused, n, k, saved=(i % 2 == 1))
            for i, (name, fused, n, k) in enumerate(mms, start=1)]


def model_block_mms(m: ModelConfig, tp: int) -> list[BlockMm]:
    """:func:`block_mms` of ``m``'s block on one of ``tp`` tensor-parallel ranks: query
    heads and the MLP split over the ranks, key / value heads too but at least one a rank
    (GQA with fewer groups than ranks replicates them)."""
    q = m.num_attention_heads * m.head_dim / tp
    kv = max(1.0, m.groups / tp) * m.head_dim
    return block_mms(m.hidden_size, q, kv, q, m.ffn / tp, m.gated_linear_unit)
