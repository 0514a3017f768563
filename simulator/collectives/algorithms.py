"""Alpha-beta cost of each collective algorithm, in seconds.

Every algorithm is ``alpha`` (per-step latency, s) times its number of steps
plus the bytes one rank must move over its bottleneck link divided by that
link's bandwidth (bytes/s): the Hockney / alpha-beta model of Thakur,
Rabenseifner and Gropp, "Optimization of Collective Communication Operations
in MPICH" (IJHPCA 2005). The bandwidth of tier ``t`` for a message of ``S``
bytes is ``t.achievable * t.size_efficiency(S)``; the curve always sees the
buffer size ``S`` of the (sub-)collective as nccl-tests counts it, because
that is the size the tier constants were fitted against.

Conventions: ``S`` is the nccl-tests buffer size (all-reduce: the vector each
rank holds; all-gather: total output; reduce-scatter: total input), ``n`` the
group size, ``l = place.local`` members per scale-up domain, ``d`` domains.
"""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

from ..hardware import Placement, Tier, Topology

RING_OPS = ("all_reduce", "reduce_scatter", "all_gather")


def tier_bandwidth(tier: Tier, nbytes: float, ranks: int = 0) -> float:
    """Achieved ring bandwidth per GPU per direction for an ``nbytes`` message over a group
    of ``ranks`` (the size curve's per-rank shard, where the tier sets ``curve_ranks``), bytes/s."""
    return tier.achievable * tier.size_efficiency(nbytes, ranks)


def ring_bandwidth(place: Placement, topo: Topology, nbytes: float) -> float:
    """Bottleneck per-rank bandwidth of a ring over ``place``, bytes/s.

    NCCL builds one ring per NIC (channel), each crossing the domain boundary
    through a different GPU's NIC, so traffic leaving a tier-(i-1) domain is
    spread over the ``per_tier[i-1]`` members there: the crossing carries
    ``per_tier[i-1] * B_i`` (nccl-tests PERFORMANCE.md: busbw reflects the
    slowest link; NVIDIA/nccl #812: 8 x 24 GB/s = 192 GB/s per DGX A100 node).
    Inside the domain the ring runs at the scale-up tier's bandwidth ``B_0``, times
    :meth:`Tier.peer_share` of the ``l`` members there: 1 behind a switch, ``(l-1)/(N-1)`` on
    a directly wired mesh of ``N`` GPUs, where the group's rings (channels) can only lay
    themselves over the links between its own members.
    """
    n = place.size
    t0 = topo.tiers[0]
    inside = t0.peer_share(place.local) * tier_bandwidth(t0, nbytes, n)
    if place.span == 0:
        return inside
    links = [inside] if place.local > 1 else []
    for i in range(1, place.span + 1):
        links.append(place.per_tier[i - 1] * tier_bandwidth(topo.tiers[i], nbytes, n))
    return min(links)


def span_latency(place: Placement, topo: Topology) -> float:
    """Per-step latency alpha, s: a synchronous step waits for its slowest (outermost) hop."""
    return topo.tiers[place.span].latency_s


def base_latency(place: Placement, topo: Topology) -> float:
    """Fixed latency charged once per collective, s: kernel launch and the protocol's
    start-up before the first step (NCCL src/graph/tuning.cc: ``baseLat[algo][proto] +
    nsteps * hwLat``); the span tier's ``base_latency_s`` (0 where not set)."""
    return topo.tiers[place.span].base_latency_s


def ring_steps(op: str, n: int) -> int:
    """Ring steps: 2(n-1) for all-reduce (reduce-scatter + all-gather), n-1 otherwise."""
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def ring_time(op: str, nbytes: float, place: Placement, topo: Topology) -> float:
    """Ring collective, s (Thakur et al. 2005, sec. 4).

    all-reduce: ``2(n-1)/n * S / B + 2(n-1) * alpha + alpha_0``;
    reduce-scatter / all-gather: ``(n-1)/n * S / B + (n-1) * alpha + alpha_0``,
    with ``B`` = :func:`ring_bandwidth` (bytes/s), ``alpha`` the span tier's per-step latency
    and ``alpha_0`` its once-per-collective latency (s, :func:`base_latency`). Inside one
    domain whose tier gives an LL protocol bandwidth ``B_LL``, the transfer term is
    ``min(moved / B, moved / B_LL)``: NCCL's tuner picks, per size, the faster of the LL
    protocol (flat, ~1/4 of the link: src/graph/tuning.cc) and the pipelined Simple one.
    """
    n = place.size
    steps = ring_steps(op, n)
    moved = steps / n * nbytes
    transfer = moved / ring_bandwidth(place, topo, nbytes)
    t0 = topo.tiers[0]
    ll = t0.ll_busbw * t0.peer_share(place.local) if place.span == 0 else 0.0
    if ll > 0:  # NCCL's tuner takes LL where its flat, lower bandwidth is faster
        transfer = min(transfer, moved / ll)
    return transfer + steps * span_latency(place, topo) + base_latency(place, topo)


def tree_time(nbytes: float, place: Placement, topo: Topology) -> float:
    """NCCL double-binary-tree all-reduce, s.

    ``2 * S / B + 2 * ceil(log2 n) * alpha``: a pipelined reduce up one tree
    and broadcast down, each of depth ``log2 n`` (Sanders, Speck & Traeff 2009,
    two-tree algorithms; NCCL 2.4 blog "Massively scale your deep learning
    training with NCCL 2.4"). NCCL's tuner gives tree all-reduce an algorithm
    bandwidth of half the bus bandwidth (src/graph/tuning.cc, ``ratio = .5``),
    hence ``2 S / B`` with ``B`` the same bottleneck bandwidth as the ring.
    """
    hops = 2 * math.ceil(math.log2(place.size))
    return (2.0 * nbytes / ring_bandwidth(place, topo, nbytes) + hops * span_latency(place, topo)
            + base_latency(place, topo))


def nvls_time(nbytes: float, place: Placement, topo: Topology) -> float:
    """NVLink SHARP (NVLS) in-switch all-reduce, s.

    The switch reduces and multicasts, so the GPU-side bus bandwidth is the
    tier's measured ``nvls_busbw`` (bytes/s) times the size curve:
    ``2(n-1)/n * S / (nvls_busbw * eff(S)) + 2(n-1) * alpha`` (NVIDIA NCCL 2.17
    release notes / "Fast multi-GPU collectives with NCCL" blog: NVLS
    all-reduce busbw 480 GB/s on DGX H100). The latency term is charged like a
    ring's: NCCL's tuner gives NVLS a larger base latency than ring LL
    (src/graph/tuning.cc ``baseLat``), so NVLS never wins on latency. Where the tier
    names the group size its busbw was measured at (``nvls_ranks`` = ``N``), the
    algorithm bandwidth is what holds at every size: in-switch reduction moves ``S`` into
    and ``S`` out of each GPU whatever ``n`` is, so the bandwidth term is
    ``2(N-1)/N * S / nvls_busbw`` (measured plateaus on GB200 NVL72, 8-64 GPUs:
    validation/collectives/nvlink5_groups.yaml, docs/collectives.md). Where each GPU's own
    link is the bound (``nvls_link_bound``, one NVSwitch domain such as DGX H100), that link
    carries ``S(1 + 1/n)`` each way: the ``multimem`` reduce of its ``1/n`` slice reads ``S``
    out of it over all slices and returns ``S/n``, the multicast store sends ``S/n`` and
    receives ``S`` (NCCL NVLS all-reduce: reduce-scatter by ``multimem.ld_reduce``, all-gather
    by ``multimem.st``). The link rate follows from the measured busbw at ``N``,
    ``B = nvls_busbw (N+1) / (2(N-1))``, and the bandwidth term is ``S (1 + 1/n) / B``: busbw
    ``2B (n-1)/(n+1)``, 370 / 411 / 441 / 463 / 480 GB/s at 4-8 H100 against 365-370 / 420 /
    440 / 460 / 480 measured (NVIDIA/nccl#1455, NCCL_ALGO=NVLS, 2-4 GiB).
    """
    n = place.size
    tier = topo.tiers[place.span]
    busbw = tier.nvls_busbw * tier.size_efficiency(nbytes, n)
    steps = 2 * (n - 1)
    ref = tier.nvls_ranks or n  # the algorithm bandwidth measured at ref ranks holds at n
    if tier.nvls_link_bound and tier.nvls_ranks:
        link = busbw * (ref + 1) / (2 * (ref - 1))  # bytes/s each GPU's link sustains
        bandwidth_time = nbytes * (1 + 1 / n) / link
    else:
        bandwidth_time = 2 * (ref - 1) / ref * nbytes / busbw
    return bandwidth_time + steps * tier.latency_s + tier.base_latency_s


def hierarchical_time(op: str, nbytes: float, place: Placement, topo: Topology) -> float:
    """Two-level (2D) collective, s: inside each domain, then across domains.

    all-reduce = reduce-scatter of ``S`` over the ``l`` local ranks, all-reduce
    of ``S/l`` across the ``d`` domains (each local rank on its own NIC, so the
    domain's ``l`` NICs work in parallel), all-gather of ``S`` inside.
    reduce-scatter = inner RS(S) + outer RS(S/l); all-gather = outer AG(S/l) +
    inner AG(S). Phases run back to back (no pipelining), as in Horovod's
    hierarchical all-reduce (Jia et al. 2018, arXiv:1807.11205).
    """
    local, domains = place.local, place.domains
    inner = topo.place(local, place.stride)
    outer = topo.place(domains, place.stride * local)
    shard = nbytes / local
    if op == "all_reduce":
        return (ring_time("reduce_scatter", nbytes, inner, topo)
                + ring_time("all_reduce", shard, outer, topo)
                + ring_time("all_gather", nbytes, inner, topo))
    return ring_time(op, nbytes, inner, topo) + ring_time(op, shard, outer, topo)


def alltoall_bandwidths(place: Placement, topo: Topology, nbytes: float) -> tuple[float, float]:
    """(intra-domain, cross-domain) all-to-all bandwidth per GPU, bytes/s.

    Intra: the scale-up tier at ``alltoall_efficiency``, times :meth:`Tier.peer_share` of
    the group's members in the domain (on a directly wired mesh each GPU sends to its
    ``l - 1`` peers over their own links, ``l - 1`` of its ``N - 1``). Cross: all-to-all
    cannot aggregate NICs, each GPU runs at about one NIC's bandwidth
    (nccl-tests #267), the slowest tier crossed, oversubscription included.
    """
    t0, n = topo.tiers[0], place.size
    intra = (t0.bandwidth * t0.alltoall_efficiency * t0.size_efficiency(nbytes, n)
             * t0.peer_share(place.local))
    cross = min((t.bandwidth * t.alltoall_efficiency / t.oversubscription
                 * t.size_efficiency(nbytes, n)) for t in topo.tiers[1:place.span + 1]) \
        if place.span > 0 else intra
    return intra, cross


def alltoall_time(send: float, nbytes: float, place: Placement, topo: Topology) -> float:
    """Pairwise-exchange all-to-all, s (Thakur et al. 2005, sec. 4.5).

    ``send`` bytes leave each rank (its own share excluded), spread evenly over
    the ``n-1`` peers: ``(l-1)/(n-1)`` of it over NVLink, ``(n-l)/(n-1)`` over
    the NIC; both links run concurrently, so
    ``max(send_in / B_in, send_out / B_out) + (n-1) * alpha``; ``nbytes`` is the
    buffer size the size curve sees.
    """
    n, local = place.size, place.local
    intra_bw, cross_bw = alltoall_bandwidths(place, topo, nbytes)
    frac_in = (local - 1) / (n - 1)
    frac_out = 1.0 - frac_in
    t_in = send * frac_in / intra_bw
    t_out = send * frac_out / cross_bw
    return max(t_in, t_out) + (n - 1) * span_latency(place, topo) + base_latency(place, topo)


def alltoall_time_rows(send: np.ndarray, place: Placement, topo: Topology) -> np.ndarray:
    """:func:`alltoall_time` of many uneven all-to-alls at once (MoE router draws), s.

    ``send[i]``: bytes the busiest rank of exchange ``i`` moves (its own share
    excluded); the buffer the size curve sees is ``send * n / (n - 1)``, as
    :func:`simulator.collectives.alltoall_time_uneven` passes it. The same formula
    and the same arithmetic, element by element; 0 where nothing moves.
    """
    send = np.asarray(send, dtype=float)
    n, local = place.size, place.local
    nbytes = send * n / (n - 1)
    safe = np.where(nbytes > 0, nbytes, 1.0)

    def curve(t: Tier) -> np.ndarray | float:  # Tier.size_efficiency over an array
        if t.half_bandwidth_bytes <= 0:
            return 1.0
        return np.where(nbytes > 0, 1.0 / (1.0 + (t.half_point(n) / safe)
                                           ** t.curve_exponent), 1.0)

    t0 = topo.tiers[0]
    intra = t0.bandwidth * t0.alltoall_efficiency * curve(t0) * t0.peer_share(local)
    cross = reduce(np.minimum, (t.bandwidth * t.alltoall_efficiency / t.oversubscription
                                * curve(t) for t in topo.tiers[1:place.span + 1])) \
        if place.span > 0 else intra
    frac_in = (local - 1) / (n - 1)
    frac_out = 1.0 - frac_in
    t = np.maximum(send * frac_in / intra, send * frac_out / cross) \
        + (n - 1) * span_latency(place, topo) + base_latency(place, topo)
    return np.where(send > 0, t, 0.0)


def send_recv_time(nbytes: float, place: Placement, topo: Topology) -> float:
    """Point-to-point transfer, s: ``alpha + S / B`` on the slowest tier the pair crosses.

    One GPU's own link (one NIC across nodes, no aggregation), Hockney model; inside a
    directly wired mesh, the one link bundle to the peer (:meth:`Tier.peer_share` of 2).
    """
    tiers = topo.tiers[: place.span + 1] if place.span > 0 else topo.tiers[:1]
    # No size curve: a single transfer has no ring pipeline to fill; the alpha term
    # carries the fixed cost (Hockney 1994).
    if place.span == 0:
        bw = tiers[0].achievable * tiers[0].peer_share(2)
    else:
        bw = min(t.achievable for t in tiers[1:])
    return span_latency(place, topo) + base_latency(place, topo) + nbytes / bw
