"""FLOPs per step: the model FLOPs of MFU, and the FLOPs the simulated kernels execute (HFU).

Model FLOPs, per sequence forward and layer: QKV ``2*s*h*(a+2g)*d``,
projection ``2*s*a*d*h``, MLP ``2*s*h*ffn`` per matrix, attention
``4*s^2*a*d`` (the full square: the PaLM / Megatron convention), plus the
logits ``2*s*h*V``. With packed documents (``training.packed_document_length`` =
``L_w``) the square is the documents' own, ``4*s*L_w*a*d``. Training is 3x the forward
(Kaplan et al. 2020; Narayanan et al. 2021 Eq. 3 without the recompute term). For GPT-3
175B at s=2048 this gives 2.20e15 FLOPs per sequence, NVIDIA's published figure.

Multi-latent attention (DeepSeek-V2/V3) replaces the QKV and projection terms by
``2*s`` times its weights (low-rank down/up projections, their norms, the shared
rope key, the output projection) and the square by ``2*s^2*a*(qk + rope + v)``;
each multi-token-prediction module adds one decoder layer of the last layer's
kind, its ``eh`` projection ``2*s*2h*h``, three norms ``2*s*3h`` and one more
logits ``2*s*h*V``. Both as Megatron-LM's ``num_floating_point_operations``
(megatron/training/training.py, ``transformer_flops``), which counts the square
causal; here the square is full for MFU and half for the causal figure.

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
from ..shape.lora import model_adapter_params_per_layer
from ..shape.mla import attention_params, core_flops
from ..shape.plan_shape import attended_keys, microbatch_runs
from ..workload.moe.layer import MoECost
from ..workload.plan import Plan


def _attention_flops(w: Workload, causal: bool) -> float:
    """Forward FLOPs of one layer's attention block for one sequence (module docs)."""
    m = w.model
    s, h, a, g, d = m.seq_length, m.hidden_size, m.num_attention_heads, m.groups, m.head_dim
    half = 0.5 if causal else 1.0
    keys = attended_keys(w)  # packed documents attend within themselves
    if m.multi_latent_attention:
        return 2.0 * s * attention_params(m) + core_flops(m, s, keys, a) * half
    square = 4 * s * keys * a * d * half
    return 2 * s * h * (a + 2 * g) * d + 2 * s * a * d * h + square


def forward_flops_per_sequence(w: Workload, causal: bool = False,
                               kept_fraction: float = 1.0) -> float:
    """Model forward FLOPs of one sequence; ``causal`` halves the attention square,
    ``kept_fraction`` scales the routed-expert FLOPs (1 - dropped share). Decoder
    layers, multi-token-prediction modules and logits (module docs)."""
    m = w.model
    s, h = m.seq_length, m.hidden_size
    mats = 3 if m.gated_linear_unit else 2
    attn = _attention_flops(w, causal)
    dense_mlp = 2 * s * h * m.ffn * mats
    mtp = m.mtp_num_layers
    layers = (m.num_layers + mtp) * (attn + dense_mlp)
    if m.moe is not None:
        moe = m.moe
        shared = 2 * s * h * moe.shared_expert_ffn_hidden_size * mats
        routed = 2 * s * h * (moe.ffn_hidden_size or m.ffn) * moe.router_topk * mats
        n_moe = moe_layer_count(w)
        layers += n_moe * (shared + 2 * s * h * moe.num_experts - dense_mlp)
        layers += n_moe * routed * kept_fraction
    mtp_extra = mtp * (2 * s * 2 * h * h + 2 * s * 3 * h)  # eh projection and norms
    return layers + mtp_extra + (1 + mtp) * 2 * s * h * m.vocab_size


def moe_layer_count(w: Workload) -> int:
    """MoE blocks of the main model and its multi-token-prediction modules."""
    moe = w.model.moe
    if moe is None:
        return 0
    return sum(1 for i in range(w.model.num_layers + w.model.mtp_num_layers)
               if is_moe_layer(moe, i))


def model_flops_per_step(w: Workload, causal: bool = False, kept_fraction: float = 1.0) -> float:
    """Model FLOPs of one training step (3x forward, whole global batch). Under LoRA the
    frozen weights get no weight gradient: 2x forward (forward and data gradient), plus
    3x the adapters' own ``2 * r * (in + out)`` per token and target (NeMo AutoModel's
    LoRA rows count the same 2x forward)."""
    passes = 2.0 if w.training.peft == "lora" else 3.0
    return (passes * forward_flops_per_sequence(w, causal, kept_fraction)
            + 3.0 * _adapter_forward_flops_per_sequence(w)) * w.training.global_batch_size


def _adapter_forward_flops_per_sequence(w: Workload) -> float:
    """Forward FLOPs of LoRA's adapters for one sequence, all layers: two FLOPs per adapter
    parameter and token (0 without LoRA)."""
    m = w.model
    return 2.0 * model_adapter_params_per_layer(w) * m.seq_length * m.num_layers


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
    ranks; backward twice the forward (once for LoRA's frozen experts); full recompute runs
    the forward again.
    """
    mats = 3 if moe.glu else 2
    per_assignment = 2.0 * moe.h * (moe.ffn / moe.etp) * mats
    router = 2.0 * moe.tokens * moe.moe.num_experts * moe.h
    # frozen experts (LoRA) run the data gradient only
    passes = (4.0 if full_recompute else 3.0) - (1.0 if moe.frozen else 0.0)
    kept, _, pairs = moe.kept_totals()
    return passes * (kept * per_assignment / moe.ep + pairs * router)


def executed_flops_per_step(plan: Plan) -> float:
    """FLOPs the simulated kernels execute in one step, all GPUs together.

    Per GPU of stage ``s``: the costed forward and backward phases of each of the
    chunks the schedule places on it (two for V-shaped and DualPipe schedules,
    whatever ``vp`` says), recompute included, times the micro-batches that chunk
    runs (DualPipe: half per direction), plus the routed-expert FLOPs of its MoE
    layers. Each stage has ``num_gpus / P`` GPUs.
    """
    w = plan.workload
    shape = plan.shape
    P = w.parallelism.pipeline
    runs = microbatch_runs(shape.schedule, P, shape.microbatches, w.parallelism.vp)
    per_gpu = sum((plan.phases[("F", s, c)].flops + plan.phases[("B", s, c)].flops)
                  * len(runs[s][c]) for s in range(P) for c in range(shape.chunks))
    if plan.moe is not None:
        rc = w.training.recompute_plan
        per_gpu += _routed_executed_per_gpu(plan.moe, rc.full or rc.has("moe"))
    return per_gpu * w.parallelism.num_gpus / P
