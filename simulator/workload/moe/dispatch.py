"""Token dispatchers of Megatron-Core: what one dispatch and one combine cost (seconds).

``model.moe.token_dispatcher_type`` (Megatron-Core ``--moe-token-dispatcher-type``):

* ``alltoall`` (``MoEAlltoAllTokDispatcher``): NCCL all-to-all over the EP group,
  one message per (token, expert) assignment; per-rank volumes follow the routing
  (:func:`simulator.moe.alltoall_bytes`, flat), and the collective ends when the
  busiest rank does. Node-limited routing does not shrink it: every assignment
  still travels on its own.
* ``allgather`` (``MoEAllGatherTokenDispatcher``): every EP rank all-gathers all
  ``ep * T`` tokens (``h`` elements each) and keeps its experts' rows; combine is
  the reduce-scatter of the expert outputs. Volume does not depend on the routing
  or top-k: ``(ep - 1) * T * h`` bytes in per rank.
* ``flex`` (DeepEP, ``enable_deepep``; deepseek-ai/DeepEP "normal" kernels):
  hierarchical. A token crosses the inter-node network once per distinct remote
  node it needs (RDMA to the same-index GPU there) and is forwarded over NVLink
  inside that node; node-limited routing (``max_nodes_per_token``) bounds the
  remote nodes (:func:`simulator.moe.alltoall_bytes` with ``ranks_per_node``), and
  group-limited routing (``router_num_groups`` / ``router_group_topk``) the ranks and
  nodes a token's experts can sit on (:func:`group_hits`).
  NVLink and RDMA run concurrently; each tier runs at its ``deepep_efficiency``
  (fitted to DeepEP's README tables, topology ``sources``).

Dispatch sends FP8 activations under an FP8 recipe (DeepSeek-V3 sec. 3.3.2;
Megatron-Core ``--moe-router-dtype``/FP8 dispatch in DeepEP), combine and every
backward exchange send bf16. Units: bytes, seconds.
"""

from __future__ import annotations

import itertools
import math
from weakref import WeakKeyDictionary

import numpy as np

from ...collectives import collective_time
from ...collectives.algorithms import alltoall_time_rows
from ...hardware import Placement, Topology
from ...moe.batch import LoadRows


class Dispatcher:
    """Dispatch / combine seconds of one MoE layer, per router draw."""

    def __init__(self, kind: str, place: Placement, topo: Topology, ep: int, tokens: int,
                 hidden: int, max_nodes: int | None,
                 groups: tuple[int, int, int] | None = None):
        self.kind, self.place, self.topo = kind, place, topo
        self.ep, self.tokens, self.h, self.max_nodes = ep, tokens, hidden, max_nodes
        self.groups = groups  # (num_experts, router_num_groups, router_group_topk)
        # GPUs of one EP group that share a scale-up (NVLink) domain.
        self.local = max(1, min(ep, place.local))

    def times(self, rows: LoadRows, dispatch_elem: float, combine_elem: float
              ) -> tuple[np.ndarray, np.ndarray]:
        """``(dispatch[n], combine[n])`` seconds of each router draw of ``rows``, numpy over
        the draws; bytes per element 1 = FP8, 2 = bf16. The volume is computed once for
        both (combine mirrors dispatch: per-rank send and receive swap, and the busiest
        rank's larger direction sets the time either way)."""
        n = len(rows)
        if self.ep <= 1:
            return np.zeros(n), np.zeros(n)
        if self.kind == "allgather":
            return (np.full(n, self._allgather(dispatch_elem)),
                    np.full(n, self._reduce_scatter(combine_elem)))
        if self.kind == "flex":
            share, kept = rows.rank_shares(self.ep)
            nvl, rdma = deepep_tokens(share, rows.topk, self.local, self.max_nodes,
                                      self.groups)
            scale = self.tokens * kept * self.h
            nvl, rdma = nvl.max(axis=-1) * scale, rdma.max(axis=-1) * scale
            return self._deepep(nvl, rdma, dispatch_elem), self._deepep(nvl, rdma, combine_elem)
        busiest = self._busiest(rows, dispatch_elem, combine_elem)
        return tuple(alltoall_time_rows(b, self.place, self.topo) for b in busiest)

    def _busiest(self, rows: LoadRows, dispatch_elem: float, combine_elem: float
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Bytes of the busiest rank's larger direction per draw, dispatch and combine
        (:func:`~simulator.collectives.alltoall_time_uneven` per row sets the time by it).
        A function of the draws, EP, tokens and hidden
        size only, not of where the group sits: kept per shared (read-only) draw table,
        for every plan of a search that reads the same one."""
        key = (self.ep, self.tokens, self.h, rows.topk, dispatch_elem, combine_elem)
        kept = _VOLUMES.get(rows) if not rows.kept_tokens.flags.writeable else None
        if kept is not None and key in kept:
            return kept[key]
        send, recv = self.flat_bytes(rows)
        out = (_max_direction(send * dispatch_elem, recv * dispatch_elem),
               _max_direction(recv * combine_elem, send * combine_elem))
        if not rows.kept_tokens.flags.writeable:
            for a in out:
                a.flags.writeable = False
            _VOLUMES.setdefault(rows, {})[key] = out
        return out

    def flat_bytes(self, rows: LoadRows) -> tuple[np.ndarray, np.ndarray]:
        """Elements each rank sends and receives in a flat all-to-all, ``([n, ep], [n, ep])``:
        :func:`simulator.moe.alltoall_bytes` of every draw (rank ``s`` sends
        ``per_src * share[r]`` to every ``r != s``)."""
        share, kept = rows.rank_shares(self.ep)
        n = len(rows)
        per_src = self.tokens * rows.topk * kept * float(self.h)
        mat = per_src[:, None, None] * np.broadcast_to(share[:, None, :], (n, self.ep, self.ep))
        mat[:, np.arange(self.ep), np.arange(self.ep)] = 0.0
        return mat.sum(axis=2), mat.sum(axis=1)

    def _allgather(self, elem: float) -> float:
        return collective_time("all_gather", self.ep * self.tokens * self.h * elem,
                               self.place, self.topo)

    def _reduce_scatter(self, elem: float) -> float:
        return collective_time("reduce_scatter", self.ep * self.tokens * self.h * elem,
                               self.place, self.topo)

    def _deepep(self, nvl, rdma, elem: float):
        """Seconds of one DeepEP normal-kernel exchange: NVLink and RDMA concurrently
        (the NVLink volume includes the forwarding of received RDMA tokens). Scalars or
        arrays over draws."""
        tiers = self.topo.tiers
        t = nvl * elem / (tiers[0].bandwidth * tiers[0].deepep_efficiency
                          * tiers[0].peer_share(self.place.local))
        if len(tiers) > 1:
            span = tiers[1:self.place.span + 1] or tiers[1:2]
            bw = min(x.bandwidth * x.deepep_efficiency / x.oversubscription for x in span)
            t = np.where(rdma > 0, np.maximum(t, rdma * elem / bw), t)
        return t + tiers[min(self.place.span, len(tiers) - 1)].latency_s


def _max_direction(send: np.ndarray, recv: np.ndarray) -> np.ndarray:
    """Per row, the busiest rank's larger direction ``[n, ep] -> [n]``."""
    return np.maximum(send.max(axis=1), recv.max(axis=1))


# busiest-rank bytes per shared draw table (weak: gone with the table), by
# (EP, tokens, hidden, top-k, bytes per element of dispatch and combine)
_VOLUMES: WeakKeyDictionary[LoadRows, dict[tuple, tuple[np.ndarray, np.ndarray]]] = \
    WeakKeyDictionary()


def deepep_tokens(share: np.ndarray, topk: int, local: int, max_nodes: int | None,
                  groups: tuple[int, int, int] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """DeepEP token copies per source token, per rank: ``(nvlink, rdma)`` ``[ep]``.

    DeepEP sends a token once per destination *rank* inside the node and once per
    destination *node* across nodes (to the same-index GPU, which forwards it over
    NVLink to the hit GPUs there): deepseek-ai/DeepEP README, "normal kernels", and
    DeepSeek-V3 sec. 3.2.2. With independent top-k picks and rank shares ``q_r``, rank
    ``r`` is hit with probability ``1 - (1 - q_r)^k`` and node ``n`` with ``1 - (1 -
    Q_n)^k``; node-limited routing scales both so a token hits at most
    ``max_nodes`` nodes; group-limited routing (``groups`` = ``(num_experts,
    router_num_groups, router_group_topk)``) gives the hits of :func:`group_hits`.
    Rank ``i`` of node ``a`` sends over RDMA one copy per hit
    remote node, ``sum_{n != a} hit_n``, and over NVLink its own copies to the hit
    peers of its node plus the forwarded copies of the ``N - 1`` remote senders,
    ``N * sum_{r in a, r != i} hit_r`` (same routing distribution for every source).
    """
    lead = share.shape[:-1]  # many draws: ``share`` is ``[n, ep]``, the results too
    ep = share.shape[-1]
    local = max(1, min(local, ep))
    nodes = ep // local
    node_share = share.reshape(*lead, nodes, local).sum(axis=-1)
    if groups is None:
        hit_r = 1.0 - (1.0 - share) ** topk
        hit_n = 1.0 - (1.0 - node_share) ** topk
    else:  # (a single group limits nothing: ``groups`` is then None, layer.py)
        experts = groups[0]
        hit_r = group_hits(share, experts // ep, groups, topk)
        hit_n = group_hits(node_share, experts // nodes, groups, topk)
    if max_nodes is not None:
        total = hit_n.sum(axis=-1, keepdims=True)
        scale = np.where(total > max_nodes, max_nodes / np.maximum(total, max_nodes), 1.0)
        hit_r, hit_n = hit_r * scale, hit_n * scale
    node_of = np.arange(ep) // local
    peers = hit_r.reshape(*lead, nodes, local).sum(axis=-1)[..., node_of] - hit_r
    nvl = nodes * peers
    rdma = hit_n.sum(axis=-1, keepdims=True) - hit_n[..., node_of]
    return nvl, rdma


def _missed(share: np.ndarray, count: int, draws: float) -> np.ndarray:
    """Probability that ``draws`` picks without replacement from ``count`` equal items
    all miss a set holding ``share`` of them: ``prod_i (N - N s - i) / (N - i)``, exact
    for a whole number of items and picks (C(N - m, d) / C(N, d)); load shares stand in
    for item counts, and a fractional last pick counts by its fraction."""
    if draws >= count:  # every item drawn
        return np.where(share > 0, 0.0, 1.0)
    n = float(count)
    out = np.ones_like(share)
    i = 0
    while i < draws and i < count:
        weight = min(1.0, draws - i)
        out = out * np.clip(1.0 - weight * n * share / (n - i), 0.0, 1.0)
        i += 1
    return out


def group_hits(share: np.ndarray, experts_per_unit: int, groups: tuple[int, int, int],
               topk: int) -> np.ndarray:
    """Probability that a token hits each unit (EP rank or node) under group-limited
    routing, ``[..., U]`` from the units' load shares ``share`` ``[..., U]``.

    Megatron-Core ``--moe-router-num-groups N`` / ``--moe-router-group-topk G``
    (``megatron/core/transformer/moe/moe_utils.py`` ``group_limited_topk``): the experts
    are split into ``N`` equal groups of consecutive experts, a token first selects
    ``G`` groups, then its top-k experts inside them (on average ``k / G`` per group).
    Device-limited routing sets ``N`` to the EP size, node-limited to the nodes
    (DeepSeek-V3 sec. 2.1.2: at most M = 4 nodes). Two layouts are exact:

    * a unit holds whole groups: it is hit when one of its groups is among the ``G``
      drawn without replacement from ``N`` (:func:`_missed`);
    * a group spans whole units: a unit is hit when its group is selected and one of the
      group's ``k / G`` distinct experts is on it (both draws by :func:`_missed`).

    Otherwise (groups and units cut each other: 8-expert groups over 12 experts a rank)
    each (unit, group) overlap is hit as in the second case, with the unit's load spread
    evenly over its experts. With one group per token a unit's overlaps are exclusive
    events (their sum); with ``G`` > 1 the sum runs over which of the unit's ``m`` groups
    are selected (exactly the set ``S``: ``C(N - m, G - |S|) / C(N, G)``, as for balanced
    groups). Dimensionless.
    """
    experts, num_groups, group_topk = groups
    size = experts // num_groups  # experts per group
    picks = topk / group_topk
    if experts_per_unit % size == 0:
        return 1.0 - _missed(share, num_groups, group_topk)
    lead, units = share.shape[:-1], share.shape[-1]
    if size % experts_per_unit == 0:
        span = size // experts_per_unit  # units per group
        q_group = share.reshape(*lead, units // span, span).sum(axis=-1)
        picked = 1.0 - _missed(q_group, num_groups, group_topk)
        q_group = np.repeat(q_group, span, axis=-1)
        within = np.divide(share, q_group, out=np.zeros_like(share), where=q_group > 0)
        return np.repeat(picked, span, axis=-1) * (1.0 - _missed(within, size, picks))
    first = np.arange(units)[:, None] * experts_per_unit
    start = np.arange(num_groups)[None, :] * size
    overlap = np.clip(np.minimum(first + experts_per_unit, start + size)
                      - np.maximum(first, start), 0, None).astype(float)  # [U, N] experts
    load = share[..., :, None] * overlap / experts_per_unit  # [..., U, N]
    q_group = load.sum(axis=-2, keepdims=True)
    within = np.divide(load, q_group, out=np.zeros_like(load), where=q_group > 0)
    given = 1.0 - _missed(within, size, picks)  # [..., U, N]: hit if that group is selected
    if group_topk == 1:
        picked = 1.0 - _missed(q_group, num_groups, group_topk)
        return np.minimum((picked * given).sum(axis=-1), 1.0)
    # the selections are drawn without replacement, so a unit's groups are not
    # independent: each selected set of them, each selected group missed with its own odds
    out = np.empty_like(share)
    for u in range(units):
        cut = np.flatnonzero(overlap[u])
        m = len(cut)
        none = np.zeros(lead)
        for chosen in itertools.product((False, True), repeat=m):
            k = sum(chosen)
            if not 0 <= group_topk - k <= num_groups - m:
                continue
            p = math.comb(num_groups - m, group_topk - k) / math.comb(num_groups, group_topk)
            term = np.full(lead, p)
            for j, sel in zip(cut, chosen, strict=True):
                if sel:
                    term = term * (1.0 - given[..., u, j])
            none = none + term
        out[..., u] = 1.0 - none
    return out


def deepep_bandwidth(ep: int, local: int, topk: int, max_nodes: int | None,
                     topo: Topology) -> float:
    """DeepEP's reported bandwidth for one uniform dispatch, bytes/s (its own metric).

    DeepEP's tests report, intranode, the bytes a rank receives (its own share
    included) and, internode, the RDMA bytes a rank sends counted once per destination
    node including its own, both divided by the kernel time; the time is
    :meth:`Dispatcher._deepep`'s (NVLink and RDMA concurrently).
    """
    share = np.full(ep, 1.0 / ep)
    nvl, rdma = deepep_tokens(share, topk, local, max_nodes)
    t0 = topo.tiers[0]
    t_nv = float(nvl.max()) / (t0.bandwidth * t0.deepep_efficiency)
    if ep <= local:
        counted = local * float(1.0 - (1.0 - 1.0 / ep) ** topk)
        return counted / t_nv
    t1 = topo.tiers[1]
    t_rdma = float(rdma.max()) / (t1.bandwidth * t1.deepep_efficiency / t1.oversubscription)
    counted = float(rdma[0] + _own_node_hit(share, topk, local, max_nodes))
    return counted / max(t_nv, t_rdma)


def _own_node_hit(share: np.ndarray, topk: int, local: int, max_nodes: int | None) -> float:
    nodes = share.size // local
    hit_n = 1.0 - (1.0 - share.reshape(nodes, local).sum(axis=1)) ** topk
    if max_nodes is not None and hit_n.sum() > max_nodes:
        hit_n = hit_n * max_nodes / hit_n.sum()
    return float(hit_n[0])
