"""Host launch-boundedness of a MoE layer: the GPU cannot run ahead of the CPU.

The CPU issues every kernel of a training step (PyTorch eager + Megatron-Core
Python), ``gpu.host_launch_s`` seconds each (a property of the node's CPU: x86
DGX vs Grace on GB200, topology ``sources``). While the GPU's kernels are longer
than that, the host runs ahead and costs nothing; when they are short (fast GPUs,
small experts) the GPU waits for the host. A synchronisation (device-to-host copy)
drains the queue: after it the GPU idles until the host has issued the next work.

Dropless MoE has one such sync per MoE layer in the forward: the grouped expert
GEMM needs the per-expert token counts on the host (Megatron-Core's dispatchers
call ``.cpu()`` / ``.tolist()`` on ``tokens_per_expert``; DeepEP's normal
``dispatch`` waits on the CPU for the received counts). The backward reuses the
counts: no sync. Only a capacity factor with padding to capacity
(``pad_expert_input_to_capacity``) fixes the shapes: no sync (Megatron-Core
MoEAlltoAllTokenDispatcher: ``cuda_sync_point = "no_sync"`` for drop-and-pad; dropping
without padding still syncs, before the first permutation).

A forward MoE layer is two segments around the sync, ``A`` = attention, router,
dispatch preprocessing and ``B`` = dispatch, experts, combine. After the sync of
layer ``i`` the host issues ``B_i`` and then ``A_{i+1}`` (no sync in between, so
``A_{i+1}`` is issued while the GPU still runs ``B_i``) and waits at the next sync.
The GPU finishes ``B_i`` at ``max(g_B, h_B)`` and ``A_{i+1}`` no earlier than it was
issued, so one layer's period is ``max(g_A + g_B, g_A + h_B, h_A + h_B)``.
Without a sync the whole layer takes ``max(gpu, host)``. CUDA graphs
(``training.cuda_graph_impl`` with ``cuda_graph_scope``) replace a graphed part's
launches by one graph launch (Megatron-Core ``--cuda-graph-scope attn moe_router moe_preprocess``).

Kernel counts per micro-batch (Megatron-Core ``MoELayer.forward``: router,
``dispatch_preprocess``, ``token_dispatch``, ``GroupedMLP``/TE ``GroupedLinear``,
``token_combine``; read from megatron/core/transformer/moe/*.py): the router
launches about 8 kernels (gating GEMM, score function, top-k, probabilities,
aux-loss / bias update), dispatch preprocessing about 12 (histogram, count
exchange, masks, permute), dispatch and combine about 6 each (exchange, sort by
local expert, unpermute); TE's grouped linear issues one GEMM per local expert
per linear, plus one quantisation per expert and linear under FP8. Backward:
twice the GEMMs (data and weight gradient) and about twice the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROUTER_KERNELS = 8
PREPROCESS_KERNELS = 12
DISPATCH_KERNELS = 6
COMBINE_KERNELS = 6
BACKWARD_FACTOR = 2.0
# Fused releases (Megatron-Core flags, Transformer Engine kernels):
# --moe-router-fusion: gating GEMM + TE fused_topk_with_score_function + the fused aux-loss
# score kernel (transformer_engine/pytorch/router.py): 3 launches for the router's 8.
FUSED_ROUTER_KERNELS = 3
# --moe-permute-fusion: TE moe_permute / moe_unpermute (one kernel each, with their index
# map) replace the mask / cumsum / index_select / sort-chunks sequences of
# megatron/core/transformer/moe/moe_utils.py: preprocessing keeps its histogram and count
# exchange (4), dispatch and combine keep their exchange and one (un)permute (3 each).
FUSED_PREPROCESS_KERNELS = 4
FUSED_DISPATCH_KERNELS = 3
FUSED_COMBINE_KERNELS = 3
# RoPE without apply_rope_fusion: Megatron-Core rope_utils._apply_rotary_pos_emb_bshd runs
# split, rotate-half (chunk, neg, cat), two products, a sum and a concat per rotated tensor
# (about 6 kernels) where TE's fused_apply_rotary_pos_emb runs one; two tensors (q, k).
UNFUSED_ROPE_EXTRA_KERNELS = 2 * (6 - 1)


@dataclass(frozen=True)
class LaunchCounts:
    """Kernels issued by the host for one MoE layer's parts (forward)."""

    attention: float  # attention block + shared expert (the layer's non-routed ops)
    router: float
    preprocess: float
    dispatch_combine: float
    experts: float


@dataclass(frozen=True)
class Fusions:
    """The release's fusion flags (Megatron-Core names: moe_router_fusion,
    moe_permute_fusion, apply_rope_fusion); all False: the eager kernel counts above."""

    router: bool = False
    permute: bool = False
    rope: bool = True


def launch_counts(attention_ops: int, local_experts: int, fp8: bool, graphed: set[str],
                  fused: Fusions = Fusions()) -> LaunchCounts:
    """Forward kernel launches; a graphed scope launches once (one graph); without a graph
    the release's fusions set the counts (module constants, with their sources)."""
    per_expert = 2 * (2 if fp8 else 1)  # fc1, fc2 (+ their FP8 input quantisation)
    experts = local_experts * per_expert + 2.0  # + activation and probability scaling
    whole = "full" in graphed or "moe" in graphed
    attention = float(attention_ops) + (0 if fused.rope else UNFUSED_ROPE_EXTRA_KERNELS)
    router = FUSED_ROUTER_KERNELS if fused.router else ROUTER_KERNELS
    preprocess = FUSED_PREPROCESS_KERNELS if fused.permute else PREPROCESS_KERNELS
    exchange = (FUSED_DISPATCH_KERNELS + FUSED_COMBINE_KERNELS if fused.permute
                else DISPATCH_KERNELS + COMBINE_KERNELS)
    return LaunchCounts(
        attention=1.0 if ("attn" in graphed or "full" in graphed) else attention,
        router=1.0 if ("moe_router" in graphed or whole) else float(router),
        preprocess=1.0 if ("moe_preprocess" in graphed or whole) else float(preprocess),
        dispatch_combine=1.0 if whole else float(exchange),
        experts=1.0 if whole else experts,
    )


def graphed_scopes(impl: str, scope: list[str], synced: bool) -> set[str]:
    """CUDA-graphed parts of a layer; a full-layer graph cannot hold a host sync."""
    if impl == "none":
        return set()
    if impl == "full_iteration":
        return {"full"}
    out = set(scope)
    if synced and ("full" in out or "moe" in out):
        out -= {"full", "moe"}
        out |= {"attn", "moe_router", "moe_preprocess"}
    return out


@dataclass(frozen=True)
class HostCost:
    """Seconds of one MoE layer part with the host model applied."""

    duration: float  # critical path including host stalls
    gpu: float  # GPU-busy seconds
    host: float  # CPU launch seconds
    stall: float  # duration - gpu: the GPU waiting for the host


def forward_cost(gpu_a: float, gpu_b: float, host_a: float, host_b: float, synced: bool
                 ) -> HostCost:
    """Forward layer: segments A and B around the sync (module docs)."""
    gpu, host = gpu_a + gpu_b, host_a + host_b
    dur = np.maximum(np.maximum(gpu, gpu_a + host_b), host) if synced else np.maximum(gpu, host)
    return HostCost(duration=dur, gpu=gpu, host=host, stall=dur - gpu)


def recompute_period(gpu_a: float, gpu_b: float, host_a: float, host_b: float,
                     gpu_bwd: float, host_bwd: float, synced: bool):
    """Seconds of a recomputed layer's backward: its forward re-run, then its backward.

    The re-run forward syncs again (segments ``A`` | sync | ``B``); after the sync the
    host issues ``B``, the layer's backward and the next re-run's ``A`` without waiting,
    so in steady state the period is ``max(g_A + g_B + g_bwd, g_A + h_B + g_bwd,
    g_A + h_B + h_bwd, h_A + h_B + h_bwd)``: the host runs ahead of the GPU through the
    backward, and the stall is a max of host and device chains, never their sum.
    Without a sync, ``max(gpu, host)`` of the whole. Non-decreasing in every GPU and host
    time (scalars or numpy arrays)."""
    if not synced:
        return np.maximum(gpu_a + gpu_b + gpu_bwd, host_a + host_b + host_bwd)
    after = np.maximum(np.maximum(gpu_b, host_b) + gpu_bwd, host_b + host_bwd)
    return np.maximum(gpu_a + after, host_a + host_b + host_bwd)


def backward_cost(gpu: float, host: float) -> HostCost:
    """Backward layer: GPU or host, whichever is longer (no sync). Both functions take
    scalars or numpy arrays (many router draws at once)."""
    dur = np.maximum(gpu, host)
    return HostCost(duration=dur, gpu=gpu, host=host, stall=dur - gpu)


def layer_periods(n: LaunchCounts, launch_s: float, synced: bool,
                  base: tuple[float, float, float], router, rest, bwd_part
                  ) -> tuple[HostCost, HostCost, np.ndarray]:
    """One MoE layer's forward, backward and re-run forward with the host applied, s.

    ``base``: the base ops' forward, backward and recompute + backward (GPU s); ``router``
    the router's forward, ``rest`` the forward's GPU seconds after the sync (experts,
    permute, exposed exchanges), ``bwd_part`` the routed part's backward GPU seconds
    (scalars or arrays over draws). The re-run forward part's duration is what the joint
    period (:func:`recompute_period`) leaves after the backward part and the base's
    recompute + backward, so a recomputed layer's three add up to that period."""
    base_f, base_b, base_redo = base
    host_a = (n.attention + n.router + n.preprocess) * launch_s
    host_b = (n.dispatch_combine + n.experts + 2) * launch_s
    host_bwd = BACKWARD_FACTOR * (host_a + host_b)
    fwd = forward_cost(base_f + router, rest, host_a, host_b, synced)
    bwd = backward_cost(base_b + bwd_part, host_bwd)
    rec_f = max(0.0, base_redo - base_b)  # the base's re-run forward, GPU s
    joint = recompute_period(rec_f + router, rest, host_a, host_b, base_b + bwd_part,
                             host_bwd, synced)
    return fwd, bwd, joint - bwd.duration - rec_f
