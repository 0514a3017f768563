"""FLOPs per step: the model FLOPs of MFU, and the FLOPs the simulated kernels execute (HFU).

Model FLOPs, per sequence forward and layer: QKV ``2*s*h*(a+2g)*d``,
projection ``2*s*a*d*h``, MLP ``2*s*h*ffn`` per matrix, attention
``4*s^2*a*d`` (the full square: the PaLM / Megatron convention), plus the
logits ``2*s*h*V``. Training is 3x the forward (Kaplan et al. 2020; Narayanan
et al. 2021 Eq. 3 without the recompute term). For GPT-3 175B at s=2048 this
gives 2.20e15 FLOPs per sequence, NVIDIA's published figure.

Two variants, both in FLOPs per step (all GPUs together):

* *causal* model FLOPs count the attention square half (what a causal mask
  leaves to compute), the convention of FlashAttention's and Megatron-Core's
  newer throughput figures;
* *executed* FLOPs are what the simulated kernels do: each op's FLOPs as costed
  (flash attention causal, its backward 2.5x its forward, Dao 2023), the
  recomputed forward included, routed-expert GEMMs only for the tokens the
  router kept. Every kernel is timed at or below its GPU's peak, so executed
  FLOPs over ``step * GPUs * peak`` (HFU) cannot exceed 1.

Tokens dropped by an MoE capacity factor do no expert work, so no variant
counts their expert FLOPs (``kept_fraction``).
"""

from __future__ import annotations

from ..config.workload import Workload
from ..moe import is_moe_layer
from ..workload.moe_layer import MoECost
from ..workload.plan import Plan


def _routed_forward_flops(w: Workload) -> float:
    """Forward FLOPs per sequence of the routed experts (top-k of them) in all MoE layers."""
    m, moe = w.model, w.model.moe
    if moe is None:
        return 0.0
    mats = 3 if m.gated_linear_unit else 2
    return moe_layer_count(w) * 2 * m.seq_length * m.hidden_size \
        * (moe.ffn_hidden_size or m.ffn) * moe.router_topk * mats


def forward_flops_per_sequence(w: Workload, causal: bool = False,
                               kept_fraction: float = 1.0) -> float:
    """Model forward FLOPs of one sequence; ``causal`` halves the attention square,
    ``kept_fraction`` scales the routed-expert FLOPs (1 - dropped share)."""
    m = w.model
    s, h, a, g, d = m.seq_length, m.hidden_size, m.num_attention_heads, m.groups, m.head_dim
    mats = 3 if m.gated_linear_unit else 2
    square = 4 * s * s * a * d * (0.5 if causal else 1.0)
    attn = 2 * s * h * (a + 2 * g) * d + 2 * s * a * d * h + square
    dense_mlp = 2 * s * h * m.ffn * mats
    layers = m.num_layers * (attn + dense_mlp)
    if m.moe is not None:
        moe = m.moe
        shared = 2 * s * h * moe.shared_expert_ffn_hidden_size * mats
        layers += moe_layer_count(w) * (shared + 2 * s * h * moe.num_experts - dense_mlp)
        layers += _routed_forward_flops(w) * kept_fraction
    return layers + 2 * s * h * m.vocab_size


def moe_layer_count(w: Workload) -> int:
    moe = w.model.moe
    if moe is None:
        return 0
    return sum(1 for i in range(w.model.num_layers) if is_moe_layer(moe, i))


def model_flops_per_step(w: Workload, causal: bool = False, kept_fraction: float = 1.0) -> float:
    """Model FLOPs of one training step (3x forward, whole global batch)."""
    return 3.0 * forward_flops_per_sequence(w, causal, kept_fraction) \
        * w.training.global_batch_size


def kept_fraction(plan: Plan) -> float:
    """Share of routed assignments the router kept, over every simulated draw (1 if dense)."""
    if plan.moe is None:
        return 1.0
    kept, total, _ = plan.moe.kept_totals()
    return float(kept / total) if total else 1.0


def _routed_executed_per_gpu(moe: MoECost, full_recompute: bool) -> float:
    """Executed FLOPs of the routed part, summed over every (layer, micro-batch) draw
    of the step, mean per GPU.

    Per draw: the router GEMM ``2*tokens*E*h`` per rank and the kept
    assignments' expert GEMMs ``2*h*(ffn/etp)*mats`` each, spread over the EP
    ranks; backward twice the forward; full recompute runs the forward again.
    """
    mats = 3 if moe.glu else 2
    per_assignment = 2.0 * moe.h * (moe.ffn / moe.etp) * mats
    router = 2.0 * moe.tokens * moe.moe.num_experts * moe.h
    passes = 4.0 if full_recompute else 3.0
    kept, _, pairs = moe.kept_totals()
    return passes * (kept * per_assignment / moe.ep + pairs * router)


def executed_flops_per_step(plan: Plan) -> float:
    """FLOPs the simulated kernels execute in one step, all GPUs together.

    Per GPU of stage ``s``: the costed forward and backward phases of each of its
    chunks (recompute included) times the micro-batches, plus the routed-expert
    FLOPs of its MoE layers. Each stage has ``num_gpus / P`` GPUs.
    """
    w = plan.workload
    P, V, M = w.parallelism.pipeline, w.parallelism.vp, w.num_microbatches
    per_gpu = sum((plan.phases[("F", s, c)].flops + plan.phases[("B", s, c)].flops) * M
                  for s in range(P) for c in range(V))
    if plan.moe is not None:
        per_gpu += _routed_executed_per_gpu(plan.moe, w.training.recompute == "full")
    return per_gpu * w.parallelism.num_gpus / P
