"""Context parallelism: ring attention (contiguous, zigzag), Ulysses, and their hybrid.

Ring attention (Liu et al. 2023; Megatron-Core ``cp_comm_type=p2p``): each of
``p`` CP ranks keeps its query chunk; KV chunks travel one hop per step for
``p-1`` hops (``p`` steps of compute), each send overlapped with the attention
of the block in hand, partial results merged by online softmax. The backward
pass sends KV and dK/dV (twice the bytes) and does 2.5x the forward FLOPs.

Causal work per (query block, key block) pair of equal size: a full block
below the diagonal, half on it, none above. With a contiguous split rank
``r`` attends to ``r + 1/2`` blocks, so the last rank is the straggler
(max/mean = (2p-1)/p). Zigzag (Megatron / Llama 3) gives rank ``r`` chunks
``r`` and ``2p-1-r`` of ``2p``; every rank then does the same work.

The replay is a discrete-event recurrence over ranks and steps: rank ``r``
starts step ``j`` when it has finished step ``j-1`` and has received block
``j`` from rank ``r-1``, whose send started when both ends reached step
``j-1``. The group finishes when its slowest rank does.

Ulysses (Jacobs et al. 2023, DeepSpeed-Ulysses): an all-to-all turns the
sequence split into a head split (Q, K, V in; the output back), attention
then runs on the full sequence for ``heads/p`` heads. Each rank sends
``(p-1)/p`` of its ``b*(s/p)*(a+2g)*d`` QKV elements and of its
``b*(s/p)*a*d`` output elements. Degree is limited by the KV heads.

Hybrid: Ulysses inside the scale-up domain, ring across it.

Packed documents (``training.packed_document_length`` = ``L_w``; Transformer Engine's THD
layout under CP): every document is split into ``2p`` chunks and each rank holds its pair of
every document, so each (rank, step) block is the same causal pattern summed over the
documents: the work matrix above scaled by ``s * L_w / s^2``, in blocks of ``L_w / p`` keys,
while the KV each step passes is the rank's whole chunk as before (less compute to hide the
same exchange behind).

Each ring step runs as it does in Transformer Engine (``AttnFuncWithCPAndKVP2P``,
transformer_engine/pytorch/attention.py): a partial flash-attention kernel on the block in
hand, at the kernel efficiency of that block's shape (:func:`simulator.compute.attention.
kernel_efficiency`: a block of ``s/p`` keys, ``s/2p`` under zigzag off the diagonal, runs
less efficiently than the whole sequence would), then the online-softmax merge of its
partial output into the running one (forward: read the step's output and LSE, read and
write the accumulator, ~6 B per output element at bf16) and, in the backward, the
accumulation of the step's dQ (read 2 B + read/write 4 B fp32 = 10 B per element) and of
the dK/dV it passes on (10 B per element of the KV block). These are bandwidth-bound
kernels on the compute stream (:func:`simulator.compute.memory_time`), after each step's
kernel, as PyTorch's ring (``torch/distributed/tensor/experimental/_attention.py``,
``_SDPAMerger``) runs them. Transformer Engine runs step ``i``'s correction on the other of
its two ``flash_attn_streams``, beside step ``i+1``'s kernel, so under a stack whose profile
says ``context_parallel.merge_overlapped`` they add no time (the last step's correction,
under 1 % of a layer at CP 2, is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..collectives import collective_time
from ..compute import attention_time, fp8_attention, memory_time
from ..compute.attention import kernel_efficiency
from ..config.stacks import run_stack
from ..hardware import Topology
from ..shape.plan_shape import attended_keys

BWD_FLOPS = 2.5  # flash-attention backward / forward FLOPs (Dao 2023)
MERGE_FWD_BYTES = 6.0  # per output element per step: read partial 2 B, read+write acc 4 B
MERGE_BWD_BYTES = 10.0  # per dQ / dKV element per step: read 2 B, read+write fp32 8 B


def block_work(p: int, zigzag: bool) -> np.ndarray:
    """``work[r, j]``: causal work of rank r at ring step j, in (s/p)^2 full blocks.

    Step j holds the KV of rank ``(r - j) mod p``.
    """
    ranks = np.arange(p)
    src = (ranks[:, None] - np.arange(p)[None, :]) % p
    if not zigzag:
        r = ranks[:, None]
        return np.where(src < r, 1.0, np.where(src == r, 0.5, 0.0))
    # zigzag: rank r holds half-chunks (r, 2p-1-r) of 2p; each half-pair is a quarter block
    def halves(x):
        return np.stack([x, 2 * p - 1 - x], axis=-1)
    q = halves(np.broadcast_to(ranks[:, None], src.shape))[..., :, None]
    k = halves(src)[..., None, :]
    quarter = np.where(k < q, 1.0, np.where(k == q, 0.5, 0.0))
    return quarter.sum(axis=(-1, -2)) / 4.0


def ring_replay(compute: np.ndarray, hop: float) -> tuple[np.ndarray, np.ndarray]:
    """Finish time of every rank's last step, and its total compute (s).

    ``compute[r, j]``: seconds of attention at step j on rank r; ``hop``:
    seconds to pass one block to the next rank. Vectorised over ranks.
    """
    p, steps = compute.shape
    start = np.zeros(p)
    finish = start + compute[:, 0]
    for j in range(1, steps):
        send_start = start  # both ends post send/recv when they begin step j-1
        arrival = np.maximum(np.roll(send_start, 1), send_start) + hop
        start = np.maximum(finish, arrival)
        finish = start + compute[:, j]
    return finish, compute.sum(axis=1)


@dataclass(frozen=True)
class AttnCost:
    """Attention of one layer on the CP group (s): critical path and its parts."""

    critical: float  # time until the slowest rank finishes
    compute: float  # attention compute of the slowest rank
    exposed_comm: float  # critical - compute: CP communication left on the path
    imbalance: float  # max over ranks of attention compute / mean


@dataclass(frozen=True)
class RingKernels:
    """What each ring step runs besides the exchange: the partial kernel's family, keys
    per block (``s/p``), head dim, and the merge bytes per step (forward: the output
    chunk's merge; backward: dQ and dK/dV accumulation), bytes of HBM traffic."""

    family: str = "te"
    block_keys: float = 0.0
    head_dim: float = 128.0
    merge_fwd_bytes: float = 0.0
    merge_bwd_bytes: float = 0.0
    fp8: str = ""  # FP8 attention's benchmark column ("fp8" / "mxfp8"); "": BF16 kernels


def block_efficiency(work: np.ndarray, kernels: RingKernels, gpu, zigzag: bool,
                     backward: bool = False) -> np.ndarray:
    """Kernel efficiency of every (rank, step) block: the diagonal block (work 0.5) is
    causal over ``s/p`` keys; under zigzag an off-diagonal step attends half-chunks
    (``s/2p`` keys per query row), without zigzag a full ``s/p`` block. Under FP8
    attention (``kernels.fp8``) each block runs at its causal or unmasked FP8 speed over
    BF16 for its pass (:mod:`simulator.compute.fp8_attention`)."""
    if kernels.block_keys <= 0:
        return np.full(work.shape, gpu.attention_efficiency)
    keys = kernels.block_keys

    def eff(k, causal):
        e = kernel_efficiency(kernels.family, gpu, k, kernels.head_dim, causal)
        if kernels.fp8:
            e *= fp8_attention.pass_rate(kernels.fp8, gpu, k, kernels.head_dim, causal,
                                         backward)
        return e
    off = eff(keys / 2 if zigzag else keys, False)
    return np.where(work == 0.5, eff(keys, True), off)


def ring_attention(full_flops: float, p: int, kv_bytes: float, zigzag: bool,
                   topo: Topology, place, backward: bool,
                   kernels: RingKernels | None = None) -> AttnCost:
    """Ring attention on ``p`` ranks for one layer.

    ``full_flops``: unmasked attention FLOPs of the WHOLE sequence on one TP
    rank's heads (``4*b*s^2*heads*d``); ``kv_bytes``: one rank's K+V chunk;
    ``kernels``: the per-step kernel shapes and merge bytes (module docstring; None: the
    topology's fitted efficiency and no merge kernels).
    """
    factor = BWD_FLOPS if backward else 1.0
    block_flops = full_flops / (p * p) * factor
    gpu = topo.gpu
    work = block_work(p, zigzag)
    kernels = kernels or RingKernels()
    eff = block_efficiency(work, kernels, gpu, zigzag, backward)
    compute = np.where(work > 0, work * block_flops / (gpu.peak("bf16") * eff), 0.0)
    compute += np.where(work > 0, gpu.kernel_overhead_s, 0.0)
    merge = kernels.merge_bwd_bytes if backward else kernels.merge_fwd_bytes
    if merge > 0:  # every step after the first merges into the running result
        steps = np.zeros(work.shape)
        steps[:, 1:] = 1.0
        compute += np.where(work > 0, steps * memory_time(merge, gpu), 0.0)
    hop = collective_time("send_recv", kv_bytes * (2 if backward else 1), place, topo)
    finish, per_rank = ring_replay(compute, hop)
    crit = float(finish.max())
    slow = float(per_rank.max())
    if crit - slow < 1e-9 * crit:  # float noise of the recurrence: nothing exposed
        crit = slow
    mean_work = work.sum(axis=1).mean()
    return AttnCost(critical=crit, compute=slow, exposed_comm=max(0.0, crit - slow),
                    imbalance=float(work.sum(axis=1).max() / mean_work))


def ulysses_attention(full_flops: float, p: int, qkv_bytes: float, out_bytes: float,
                      topo: Topology, place, backward: bool,
                      efficiency: float | None = None) -> AttnCost:
    """Ulysses on ``p`` ranks: all-to-all in, balanced causal attention, all-to-all out.

    ``qkv_bytes`` / ``out_bytes``: one rank's Q+K+V and output chunk (bytes);
    each all-to-all moves ``(p-1)/p`` of them off the rank.
    """
    factor = BWD_FLOPS if backward else 1.0
    flops = full_flops / p * 0.5 * factor
    comp = attention_time(flops, topo.gpu, efficiency)
    comm = collective_time("all_to_all", qkv_bytes, place, topo) \
        + collective_time("all_to_all", out_bytes, place, topo)
    return AttnCost(critical=comp + comm, compute=comp, exposed_comm=comm, imbalance=1.0)


def ulysses_volume(b: int, s: int, p: int, heads: float, groups: float, d: int,
                   elem: int = 2) -> tuple[float, float]:
    """Bytes one rank sends in Ulysses' two forward all-to-alls (QKV in, output out)."""
    chunk = b * s / p
    return (chunk * (heads + 2 * groups) * d * elem * (p - 1) / p,
            chunk * heads * d * elem * (p - 1) / p)


def make_attention(w, topo: Topology, groups, x):
    """The CostContext ``attention`` hook for a workload with ``context > 1`` (else None).

    ``x``: the workload's :class:`~simulator.workload.ops.Dims`. Results are
    cached per direction: every layer of a model has the same attention.
    """
    p = w.parallelism
    c = p.context
    if c == 1:
        return None
    from ..errors import ConfigError

    if not w.training.use_flash_attn:
        raise ConfigError("training.use_flash_attn", False,
                          "context parallelism needs fused (flash) attention, as in "
                          "Megatron-Core / Transformer Engine")
    # unmasked, whole sequence, this TP rank; packed documents attend within themselves:
    # the square is s * L_w (plan_shape.attended_keys), split over the ranks as each document is
    keys = attended_keys(w)
    full = 4.0 * x.b * x.s * keys * x.a_t * x.d
    place = groups["cp"]
    elem = x.e
    algo = p.context_parallel_algo
    u = _ulysses_degree(algo, c, place.local, x.g_t)
    r = c // u
    stack = run_stack(w.training)
    family = stack.attention_for(w.training.stack_release)
    out_elems = x.b * (x.s / r) * (x.a_t / u) * x.d
    kv_elems = 2.0 * x.b * (x.s / r) * (x.g_t / u) * x.d
    serial = 0.0 if stack.cp_merge_overlapped else 1.0  # TE: beside the next step's kernel
    fp8 = fp8_attention.recipe_of(w.training)
    kernels = RingKernels(family=family, block_keys=keys / r, head_dim=x.d,
                          merge_fwd_bytes=serial * MERGE_FWD_BYTES * out_elems,
                          merge_bwd_bytes=serial * MERGE_BWD_BYTES * (out_elems + kv_elems),
                          fp8=fp8)
    cache: dict[bool, AttnCost] = {}

    def attention(op, backward: bool) -> AttnCost:
        if backward in cache:
            return cache[backward]
        cost = AttnCost(0.0, 0.0, 0.0, 1.0)
        if u > 1:
            uplace = topo.place(u, place.stride)
            qkv, out = ulysses_volume(x.b, x.s // r, u, x.a_t, x.g_t, x.d, elem)
            eff = kernel_efficiency(family, topo.gpu, keys / r, x.d, True)
            if fp8:
                eff *= fp8_attention.pass_rate(fp8, topo.gpu, keys / r, x.d, True, backward)
            cost = ulysses_attention(full / (r * r) if r > 1 else full, u,
                                     qkv * u / (u - 1), out * u / (u - 1), topo, uplace,
                                     backward, eff)
        if r > 1:
            rplace = topo.place(r, place.stride * u)
            kv = 2.0 * x.b * (x.s / r) * (x.g_t / u) * x.d * elem
            ring = ring_attention(full / u, r, kv, algo != "ring", topo, rplace, backward,
                                  kernels)
            comm = cost.exposed_comm + ring.exposed_comm
            cost = AttnCost(critical=comm + ring.compute, compute=ring.compute,
                            exposed_comm=comm, imbalance=ring.imbalance)
        cache[backward] = cost
        return cost

    return attention


def _ulysses_degree(algo: str, c: int, local: int, kv_heads: float) -> int:
    """All-to-all degree: all of CP (ulysses), the in-domain part (hybrid), or 1 (ring)."""
    if algo == "ulysses":
        return c
    if algo != "hybrid":
        return 1
    u = 1
    for d in range(1, c + 1):
        if c % d == 0 and d <= local and kv_heads % d == 0:
            u = d
    return u
