"""Cost of the routed-expert part of one MoE layer, per micro-batch draw of the router.

Per MoE layer and micro-batch (Megatron-Core's all-to-all token dispatcher):

1. router GEMM ``T x h @ h x E`` and token permutation (bandwidth bound);
2. **dispatch** all-to-all over the EP group: each source rank sends each of
   its assignments (``h`` elements; FP8 with an FP8 recipe) to the rank of its
   expert; per-rank volumes follow the actual routing, and the collective ends
   when its busiest rank does (:func:`simulator.collectives.alltoall_time_uneven`);
3. expert FFNs as one grouped GEMM per rank: expert ``e`` multiplies its
   ``n_e`` kept tokens, so small groups run at lower efficiency (the GEMM
   shape curve of :func:`simulator.compute.gemm_efficiency`) and the slowest EP
   rank sets the pace;
4. **combine** all-to-all (bf16), the mirror of dispatch, and un-permutation.

Backward: the same two all-to-alls (gradients) and twice the expert FLOPs.
Source tokens per rank: ``T * etp / tp`` (with ETP < TP the TP ranks split the
tokens between them, Megatron-Core parallel folding). Router draws are seeded
by ``(seed, layer, micro-batch)``, so a run is reproducible and a different
seed changes only these draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..collectives import alltoall_time_uneven
from ..compute import gemm_efficiency, memory_time
from ..config.workload import Workload
from ..hardware import Placement, Topology
from ..moe import RouterLoads, alltoall_bytes, rng_for, route


@dataclass(frozen=True)
class MoEPart:
    """Seconds of one MoE block on the critical EP rank."""

    duration: float
    compute: float
    exposed_ep: float
    dispatch: float
    combine: float
    experts: float
    loads: RouterLoads


class MoECost:
    """Routed-expert cost model for one workload on one topology."""

    def __init__(self, w: Workload, topo: Topology, groups: dict[str, Placement], T: float):
        m, p = w.model, w.parallelism
        assert m.moe is not None
        self.w, self.topo, self.moe = w, topo, m.moe
        self.place = groups["ep"]
        self.ep = p.expert
        self.etp = p.etp
        self.h = m.hidden_size
        self.ffn = m.moe.ffn_hidden_size or m.ffn
        self.glu = m.gated_linear_unit
        self.tokens = max(1, round(T * self.etp / p.tensor))  # source tokens per rank
        self.fp8 = w.training.precision == "fp8"
        self.seed = w.training.seed
        self._cache: dict[tuple[int, int], tuple[MoEPart, MoEPart]] = {}

    def draws(self) -> list[RouterLoads]:
        """Every router draw costed so far, one per (layer, micro-batch)."""
        return [fwd.loads for fwd, _ in self._cache.values()]

    def route(self, layer: int, mb: int) -> RouterLoads:
        rng = rng_for(self.seed, layer, mb)
        return route(self.moe, self.tokens * self.ep, rng)

    def expert_seconds(self, kept: np.ndarray, backward: bool) -> np.ndarray:
        """Grouped-GEMM seconds per EP rank for per-expert kept assignments ``kept``."""
        gpu = self.topo.gpu
        dtype = "fp8" if self.fp8 else "bf16"
        n = kept.astype(float)
        f = self.ffn / self.etp
        shapes = [(n, f * (2 if self.glu else 1), self.h), (n, self.h, f)]
        total = np.zeros_like(n)
        for mm, nn, kk in shapes:
            flops = 2.0 * mm * nn * kk
            eff = gemm_efficiency(np.maximum(mm, 1.0), nn, kk, gpu, dtype)
            total += flops / (gpu.peak(dtype) * eff)
        act = n * f * 2 * (3 if self.glu else 2) / (gpu.hbm_bandwidth *
                                                    gpu.memory_bandwidth_efficiency)
        per_expert = (total + act) * (2.0 if backward else 1.0)
        per_rank = per_expert.reshape(self.ep, -1).sum(axis=1)
        return per_rank + 2 * gpu.kernel_overhead_s * (2.0 if backward else 1.0)

    def part(self, layer: int, mb: int, backward: bool) -> MoEPart:
        key = (layer, mb)
        if key not in self._cache:
            loads = self.route(layer, mb)
            experts = float(self.expert_seconds(loads.kept_tokens, False).max())
            send, recv = alltoall_bytes(loads, self.ep, self.tokens, 1.0)  # per byte/token
            self._cache[key] = (self._cost(loads, experts, send, recv, False),
                                self._cost(loads, experts, send, recv, True))
        return self._cache[key][1 if backward else 0]

    def _a2a(self, send: np.ndarray, recv: np.ndarray, bytes_per_token: float) -> float:
        return alltoall_time_uneven(send * bytes_per_token, recv * bytes_per_token, self.place,
                                    self.topo)

    def _cost(self, loads: RouterLoads, experts: float, send: np.ndarray, recv: np.ndarray,
              backward: bool) -> MoEPart:
        gpu = self.topo.gpu
        experts *= 2.0 if backward else 1.0
        dispatch = self._a2a(send, recv, self.h * (1 if self.fp8 and not backward else 2))
        combine = self._a2a(send, recv, self.h * 2)
        rows = self.tokens * self.moe.router_topk
        local = (memory_time(2 * 2 * rows * self.h, gpu) * 2
                 + _router_gemm(self.tokens, self.moe.num_experts, self.h, gpu))
        local *= 2.0 if backward else 1.0
        compute = experts + local
        exposed = dispatch + combine
        return MoEPart(duration=compute + exposed, compute=compute, exposed_ep=exposed,
                       dispatch=dispatch, combine=combine, experts=experts, loads=loads)


def _router_gemm(tokens: float, experts: int, h: int, gpu) -> float:
    eff = gemm_efficiency(tokens, experts, h, gpu, "bf16")
    return 2.0 * tokens * experts * h / (gpu.peak("bf16") * eff) + gpu.kernel_overhead_s
