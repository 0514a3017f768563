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
  remote nodes (:func:`simulator.moe.alltoall_bytes` with ``ranks_per_node``).
  NVLink and RDMA run concurrently; each tier runs at its ``deepep_efficiency``
  (fitted to DeepEP's README tables, topology ``sources``).

Dispatch sends FP8 activations under an FP8 recipe (DeepSeek-V3 sec. 3.3.2;
Megatron-Core ``--moe-router-dtype``/FP8 dispatch in DeepEP), combine and every
backward exchange send bf16. Units: bytes, seconds.
"""

from __future__ import annotations

import numpy as np

from ..collectives import alltoall_time_uneven, collective_time
from ..hardware import Placement, Topology
from ..moe import RouterLoads, alltoall_bytes


class Dispatcher:
    """Dispatch / combine seconds of one MoE layer for one router draw."""

    def __init__(self, kind: str, place: Placement, topo: Topology, ep: int, tokens: int,
                 hidden: int, max_nodes: int | None):
        self.kind, self.place, self.topo = kind, place, topo
        self.ep, self.tokens, self.h, self.max_nodes = ep, tokens, hidden, max_nodes
        # GPUs of one EP group that share a scale-up (NVLink) domain.
        self.local = max(1, min(ep, place.local))

    def times(self, loads: RouterLoads, dispatch_bytes: float, combine_bytes: float
              ) -> tuple[float, float]:
        """(dispatch, combine) seconds; ``*_bytes`` per element (1 = FP8, 2 = bf16)."""
        if self.ep <= 1:
            return 0.0, 0.0
        if self.kind == "allgather":
            return self._allgather(dispatch_bytes), self._reduce_scatter(combine_bytes)
        if self.kind == "flex":
            send, recv, inter = self._hier(loads)
            return (self._deepep(send, recv, inter, dispatch_bytes),
                    self._deepep(send, recv, inter, combine_bytes))
        send, recv = alltoall_bytes(loads, self.ep, self.tokens, float(self.h))
        return (alltoall_time_uneven(send * dispatch_bytes, recv * dispatch_bytes,
                                     self.place, self.topo),
                alltoall_time_uneven(recv * combine_bytes, send * combine_bytes,
                                     self.place, self.topo))

    def _allgather(self, elem: float) -> float:
        return collective_time("all_gather", self.ep * self.tokens * self.h * elem,
                               self.place, self.topo)

    def _reduce_scatter(self, elem: float) -> float:
        return collective_time("reduce_scatter", self.ep * self.tokens * self.h * elem,
                               self.place, self.topo)

    def _hier(self, loads: RouterLoads) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-rank (NVLink send, NVLink recv, inter-node send) elements of one dispatch."""
        if self.local >= self.ep or self.ep % self.local:
            send, recv = alltoall_bytes(loads, self.ep, self.tokens, float(self.h))
            return send, recv, np.zeros_like(send)
        flat_send, _ = alltoall_bytes(loads, self.ep, self.tokens, float(self.h))
        hs, hr = alltoall_bytes(loads, self.ep, self.tokens, float(self.h), self.local,
                                self.max_nodes)
        # Intra-node part of the hierarchical volumes: flat volume to same-node peers
        # (routing is identically distributed over source ranks, see moe/alltoall.py).
        intra = flat_send * (self.local - 1) / (self.ep - 1)
        inter = np.maximum(np.maximum(hs, hr) - intra, 0.0)
        return intra, intra, inter

    def _deepep(self, nv_send: np.ndarray, nv_recv: np.ndarray, inter: np.ndarray,
                elem: float) -> float:
        """Seconds of one DeepEP normal-kernel exchange: NVLink and RDMA concurrently.

        RDMA bytes arrive on the same-index GPU of each destination node and are
        forwarded over NVLink there, so NVLink also carries the inter-node bytes.
        """
        t0 = self.topo.tiers[0]
        nvlink = t0.bandwidth * t0.deepep_efficiency
        busiest_nv = float(max(nv_send.max(), nv_recv.max()) + inter.max()) * elem
        t = busiest_nv / nvlink
        if inter.max() > 0 and len(self.topo.tiers) > 1:
            span = self.topo.tiers[1:self.place.span + 1] or self.topo.tiers[1:2]
            rdma = min(x.bandwidth * x.deepep_efficiency / x.oversubscription for x in span)
            t = max(t, float(inter.max()) * elem / rdma)
        return t + self.topo.tiers[min(self.place.span, len(self.topo.tiers) - 1)].latency_s
