"""Public entry points: time of a collective, the algorithm NCCL would pick, bandwidths.

Units: bytes, seconds, bytes/s. The bus-bandwidth factors are those of
nccl-tests doc/PERFORMANCE.md: ``busbw = algbw * f`` with ``f = 2(n-1)/n``
for all-reduce, ``(n-1)/n`` for reduce-scatter, all-gather and all-to-all,
and 1 for point-to-point; ``algbw = S / t``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..hardware import Placement, Topology
from . import algorithms as alg

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")
ALGOS = ("ring", "tree", "nvls", "hierarchical", "direct")


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ConfigError("op", op, f"must be one of {', '.join(OPS)}")


def available_algorithms(op: str, place: Placement, topo: Topology) -> list[str]:
    """Algorithms that apply to ``op`` on this placement, in tie-break order.

    ring: all-reduce / reduce-scatter / all-gather. tree: all-reduce across
    domains (NCCL's tree is inter-node). nvls: all-reduce when the whole group
    sits inside a tier with NVLink SHARP. hierarchical: the group spans
    several domains with more than one member in each. direct: all-to-all and
    send/recv (their only algorithm).
    """
    _check_op(op)
    if op in ("all_to_all", "send_recv"):
        return ["direct"]
    algos = ["ring"]
    multi = place.span > 0 and place.domains > 1
    if op == "all_reduce" and multi:
        algos.append("tree")
    if op == "all_reduce" and topo.tiers[place.span].nvls_busbw:
        algos.append("nvls")
    if multi and place.local > 1:
        algos.append("hierarchical")
    return algos


def _time(op: str, algo: str, nbytes: float, place: Placement, topo: Topology) -> float:
    if algo == "ring":
        return alg.ring_time(op, nbytes, place, topo)
    if algo == "tree":
        return alg.tree_time(nbytes, place, topo)
    if algo == "nvls":
        return alg.nvls_time(nbytes, place, topo)
    if algo == "hierarchical":
        return alg.hierarchical_time(op, nbytes, place, topo)
    if op == "send_recv":
        return alg.send_recv_time(nbytes, place, topo)
    n = place.size
    return alg.alltoall_time(nbytes * (n - 1) / n, nbytes, place, topo)


def collective_time(op: str, nbytes: float, place: Placement, topo: Topology,
                    algo: str | None = None) -> float:
    """Seconds for collective ``op`` on a buffer of ``nbytes`` (nccl-tests size S).

    ``algo=None`` picks the fastest applicable algorithm, as NCCL's tuner
    would; a named ``algo`` that does not apply raises :class:`ConfigError`.
    A group of one rank, or an empty buffer, costs 0.
    """
    _check_op(op)
    if nbytes < 0:
        raise ConfigError("nbytes", nbytes, "must be >= 0")
    if algo is not None and algo not in ALGOS:
        raise ConfigError("algo", algo, f"must be one of {', '.join(ALGOS)}")
    if place.size <= 1 or nbytes == 0:
        return 0.0
    # a pure function of its arguments: a sweep asks the same sizes on the same groups
    return topo.memo(("collective", op, nbytes, type(nbytes), place, algo),
                     lambda: _collective_time(op, nbytes, place, topo, algo))


def _collective_time(op: str, nbytes: float, place: Placement, topo: Topology,
                     algo: str | None) -> float:
    algos = available_algorithms(op, place, topo)
    if algo is not None:
        if algo not in algos:
            raise ConfigError("algo", algo, f"not applicable to {op} on {place.size} ranks "
                                            f"(stride {place.stride}); available: "
                                            f"{', '.join(algos)}")
        return _time(op, algo, nbytes, place, topo)
    return min(_time(op, a, nbytes, place, topo) for a in algos)


def best_algorithm(op: str, nbytes: float, place: Placement, topo: Topology) -> str:
    """Name of the fastest applicable algorithm (first in tie-break order on ties)."""
    algos = available_algorithms(op, place, topo)
    if place.size <= 1 or nbytes <= 0:
        return algos[0]
    return min(algos, key=lambda a: _time(op, a, nbytes, place, topo))


def alltoall_time_uneven(send_bytes: np.ndarray, recv_bytes: np.ndarray, place: Placement,
                         topo: Topology) -> float:
    """Seconds for an all-to-all with per-rank volumes (MoE dispatch / combine).

    ``send_bytes[r]`` / ``recv_bytes[r]``: bytes leaving / entering rank ``r``,
    local share excluded. Each link is full duplex, so a rank is busy for its
    larger direction; the collective ends when the busiest rank does, and the
    pairwise cost of :func:`algorithms.alltoall_time` is monotone in volume, so
    only the maximum matters (one vectorised ``max``, no per-rank loop). With
    uniform volumes ``(n-1)/n * S`` this equals ``collective_time("all_to_all", S)``.
    """
    send = np.asarray(send_bytes, dtype=float)
    recv = np.asarray(recv_bytes, dtype=float)
    n = place.size
    if send.shape != (n,) or recv.shape != (n,):
        raise ConfigError("send_bytes/recv_bytes", (send.shape, recv.shape),
                          f"must both have shape ({n},), one entry per rank")
    if n <= 1:
        return 0.0
    busiest = float(max(send.max(), recv.max()))
    if busiest <= 0:
        return 0.0
    return alg.alltoall_time(busiest, busiest * n / (n - 1), place, topo)


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw ratio (doc/PERFORMANCE.md)."""
    _check_op(op)
    if n <= 1 or op == "send_recv":
        return 1.0
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def algo_bandwidth(nbytes: float, seconds: float) -> float:
    """nccl-tests algbw = S / t, bytes/s (0 when ``seconds`` is 0)."""
    return nbytes / seconds if seconds > 0 else 0.0


def bus_bandwidth(op: str, nbytes: float, n: int, seconds: float) -> float:
    """nccl-tests busbw, bytes/s: algbw times the op's bus factor."""
    return algo_bandwidth(nbytes, seconds) * bus_factor(op, n)
