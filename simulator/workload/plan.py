"""Assemble a workload on a topology into the engine's input.

For every pipeline stage and model chunk this costs the forward and backward
phases: embedding on the first chunk of stage 0, output layer and loss on the
last chunk of the last stage, decoder layers in between. Dense layers are
identical, so one is costed and repeated. MoE layers add a routed-expert part
that depends on the router's draw for that layer and micro-batch, so phase
durations may differ per micro-batch (``fwd[s, c, mb]``). Also costed: the
p2p transfer per micro-batch, the gradient buckets and the optimizer step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..collectives import collective_time
from ..compute import BYTES, optimizer_time
from ..config.workload import Workload
from ..engine import EngineInput
from ..hardware import Placement, Topology
from ..memory.parameters import StageParams, stage_layer_indices, stage_params
from ..moe import is_moe_layer
from ..schedules import build_schedule
from .context import make_attention
from .cost import CostContext, Phase, TimedOp, cost_ops
from .layout import group_layout
from .moe_layer import MoECost, MoEPart, add_ep_breakdown
from .ops import backward_of, dims, embedding_forward, layer_forward, output_forward, recompute_ops
from .partition import Partition, partition_layers

GRAD_BYTES = 4  # fp32 gradient reduction (Megatron's default for bf16 training)
PARAM_BYTES = BYTES["bf16"]
AXES = ("compute", "tp", "cp", "ep")


@dataclass
class Plan:
    """Everything the engine and the metrics need for one configuration."""

    workload: Workload
    topo: Topology
    partition: Partition
    groups: dict[str, Placement]
    phases: dict[tuple[str, int, int], Phase]  # (phase, stage, chunk) -> micro-batch 0
    engine_input: EngineInput
    stage_params: list[StageParams]
    totals: list[dict[str, float]]  # per stage: compute / tp / cp / ep seconds, all phases
    notes: list[str]
    imbalance: dict[str, float] = field(default_factory=dict)
    moe: MoECost | None = None
    ep_breakdown: list[dict[str, float]] = field(default_factory=list)  # per stage, seconds


class _Builder:
    def __init__(self, w: Workload, topo: Topology):
        p, tr = w.parallelism, w.training
        self.w, self.topo = w, topo
        self.part = partition_layers(w)
        self.groups = group_layout(w, topo)
        x = dims(w)
        self.ctx = CostContext(topo=topo, groups=self.groups, dtype=tr.precision,
                               tp_overlap=tr.tp_comm_overlap and p.sequence_parallel,
                               attention=make_attention(w, topo, self.groups, x),
                               async_grad_allreduce=tr.async_tensor_model_parallel_allreduce)
        self.dense = self._layer(None)
        shared = w.model.moe.shared_expert_ffn_hidden_size if w.model.moe else 0
        self.moe_base = self._layer(shared) if w.model.moe else None
        self.moe = MoECost(w, topo, self.groups, x.T, self.moe_base) if w.model.moe else None
        self.full_recompute = tr.recompute == "full"
        self._layer_ids: dict[tuple[int, int], list[int]] = {}
        self.ep_parts: list[MoEPart] = []  # MoE parts of the last chunk() call
        emb, out = embedding_forward(w), output_forward(w)
        self.embed = (cost_ops(emb, self.ctx), cost_ops(backward_of(emb), self.ctx))
        self.output = (cost_ops(out, self.ctx), cost_ops(backward_of(out), self.ctx))

    def _layer(self, ffn: int | None) -> tuple[Phase, Phase]:
        fwd = layer_forward(self.w, ffn)
        return (cost_ops(fwd, self.ctx),
                cost_ops(recompute_ops(self.w, fwd) + backward_of(fwd), self.ctx))

    def chunk(self, s: int, c: int, mb: int, first: bool, last: bool, ops: bool):
        """(forward, backward) phases of chunk c on stage s for micro-batch mb."""
        w = self.w
        f, b = Phase(), Phase()
        self.ep_parts = []
        if first:
            f.extend(self.embed[0], ops=ops)
        if last:
            b.extend(self.output[1], ops=ops)
        dense_run = 0
        for layer in self._chunk_layers(s, c):
            if self.moe is None or not is_moe_layer(w.model.moe, layer):
                dense_run += 1
                continue
            f.extend(self.dense[0], dense_run, ops), b.extend(self.dense[1], dense_run, ops)
            dense_run = 0
            fp, bp = self.moe.part(layer, mb, False), self.moe.part(layer, mb, True)
            self.ep_parts += [fp, bp]
            f.extend(self.moe_base[0], ops=ops)
            f.extend(_moe_phase(fp, ops), ops=ops)
            b.extend(_moe_phase(bp, ops), ops=ops)
            if self.full_recompute:
                b.extend(_moe_phase(fp, ops), ops=ops)
            b.extend(self.moe_base[1], ops=ops)
        f.extend(self.dense[0], dense_run, ops), b.extend(self.dense[1], dense_run, ops)
        if last:
            self._mtp(f, b, mb, ops)
            f.extend(self.output[0], ops=ops)
        if first:
            b.extend(self.embed[1], ops=ops)
        return f, b

    def _mtp(self, f: Phase, b: Phase, mb: int, ops: bool) -> None:
        """Multi-token-prediction modules on the last stage: each one more decoder layer
        of the last layer's kind and one more output layer + loss (DeepSeek-V3 sec. 2.2)."""
        m = self.w.model
        for k in range(m.mtp_num_layers):
            layer = m.num_layers + k
            if self.moe is not None and is_moe_layer(m.moe, layer):
                fp, bp = self.moe.part(layer, mb, False), self.moe.part(layer, mb, True)
                self.ep_parts += [fp, bp]
                f.extend(self.moe_base[0], ops=ops), f.extend(_moe_phase(fp, ops), ops=ops)
                b.extend(_moe_phase(bp, ops), ops=ops), b.extend(self.moe_base[1], ops=ops)
            else:
                f.extend(self.dense[0], ops=ops), b.extend(self.dense[1], ops=ops)
            f.extend(self.output[0], ops=ops), b.extend(self.output[1], ops=ops)

    def _chunk_layers(self, s: int, c: int) -> list[int]:
        """Global layer indices of chunk c on stage s (cached: MoE plans ask once per
        micro-batch)."""
        key = (s, c)
        if key not in self._layer_ids:
            ids = stage_layer_indices(self.part, s)
            before = sum(self.part.layers[s][:c])
            self._layer_ids[key] = ids[before:before + self.part.layers[s][c]]
        return self._layer_ids[key]


def _moe_phase(part: MoEPart, ops: bool) -> Phase:
    ph = Phase(duration=part.duration, compute=part.compute,
               exposed={"tp": 0.0, "cp": 0.0, "ep": part.exposed_ep})
    if ops:
        ph.ops = [TimedOp("ep_dispatch", "ep", 0.0, part.dispatch, 0.0, 0.0),
                  TimedOp("experts", "compute", part.dispatch, part.experts, 0.0, 0.0),
                  TimedOp("ep_combine", "ep", part.dispatch + part.compute, part.combine,
                          0.0, 0.0)]
    return ph


def build_plan(w: Workload, topo: Topology) -> Plan:
    bld = _Builder(w, topo)
    p = w.parallelism
    P, V, M = p.pipeline, p.vp, w.num_microbatches
    fwd, bwd = np.zeros((P, V, M)), np.zeros((P, V, M))
    phases: dict[tuple[str, int, int], Phase] = {}
    totals = [dict.fromkeys(AXES, 0.0) for _ in range(P)]
    ep_totals: list[dict[str, float]] = [{} for _ in range(P)]
    varies = bld.moe is not None and not bld.moe.deterministic  # per micro-batch draws
    for s in range(P):
        for c in range(V):
            first, last = s == 0 and c == 0, s == P - 1 and c == V - 1
            for mb in range(M if varies else 1):
                f, b = bld.chunk(s, c, mb, first, last, ops=mb == 0)
                if mb == 0:
                    phases[("F", s, c)], phases[("B", s, c)] = f, b
                sl = slice(mb, mb + 1) if varies else slice(None)
                fwd[s, c, sl], bwd[s, c, sl] = f.duration, b.duration
                weight = 1 if varies else M
                for part in bld.ep_parts:
                    add_ep_breakdown(ep_totals[s], part, weight)
                for ph in (f, b):
                    totals[s]["compute"] += ph.compute * weight
                    for axis in ("tp", "cp", "ep"):
                        totals[s][axis] += ph.exposed.get(axis, 0.0) * weight
    params = [stage_params(w, bld.part, s) for s in range(P)]
    notes = [bld.part.note] if "even split" not in bld.part.note else []
    imbalance = {}
    if bld.ctx.attention is not None:
        imbalance["cp"] = bld.ctx.attention(None, False).imbalance
    if bld.moe is not None:
        imbalance.update(_moe_imbalance(bld.moe))
    return Plan(workload=w, topo=topo, partition=bld.part, groups=bld.groups, phases=phases,
                engine_input=_engine_input(w, topo, bld, fwd, bwd, params),
                stage_params=params, totals=totals, notes=notes, imbalance=imbalance,
                moe=bld.moe, ep_breakdown=ep_totals if bld.moe is not None else [])


def _moe_imbalance(moe: MoECost) -> dict[str, float]:
    """Mean over every simulated (layer, micro-batch) draw of the router figures."""
    figs = [loads.imbalance(moe.ep) for loads in moe.draws()]
    if not figs:
        return {}
    mean = {k: float(np.mean([f[k] for f in figs])) for k in figs[0]}
    return {"ep_expert_max_over_mean": mean["expert_max_over_mean"],
            "ep_rank_max_over_mean": mean["rank_max_over_mean"],
            "ep_dropped_fraction": mean["dropped_fraction"],
            "ep_balance_loss": mean["balance_loss"]}


def _buckets(params: float, dp: int, group: Placement, topo: Topology, dist_opt: bool,
             grad_bytes: float = GRAD_BYTES) -> list[tuple[float, float]]:
    """(seconds, bytes) of each DDP bucket of a chunk holding ``params`` elements.

    Megatron-Core DDP buckets hold ``max(40e6, 1e6 * dp)`` parameters; each is
    reduce-scattered (distributed optimizer) or all-reduced, in fp32 unless
    ``grad_reduce_in_fp32`` is off (then bf16, ``grad_bytes`` = 2).
    """
    if group.size <= 1 or params <= 0:
        return []
    size = max(40e6, 1e6 * dp)
    n = max(1, math.ceil(params / size))
    op = "reduce_scatter" if dist_opt else "all_reduce"
    nbytes = params / n * grad_bytes
    return [(collective_time(op, nbytes, group, topo), nbytes)] * n


def _engine_input(w: Workload, topo: Topology, bld: _Builder, fwd, bwd,
                  params: list[StageParams]) -> EngineInput:
    p, tr = w.parallelism, w.training
    g = bld.groups
    x = dims(w)
    P, V = p.pipeline, p.vp
    act = x.Tn * x.h * x.e  # SP sends the sequence-parallel shard between stages
    p2p = collective_time("send_recv", act, g["pp"], topo) if P > 1 else 0.0
    dense_shard = p.data * p.context if tr.distributed_optimizer else 1
    edp = g["edp"].size if tr.distributed_optimizer else 1
    buckets, sizes, opt, ag, ag_bytes = [], [], [], [], []
    grad_bytes = GRAD_BYTES if tr.grad_reduce_in_fp32 else BYTES["bf16"]
    for s in range(P):
        sp = params[s]
        per_chunk = bld.part.layers[s]
        total_layers = max(1, sum(per_chunk))
        row = []
        for c in range(V):
            share = per_chunk[c] / total_layers
            row.append(_buckets(sp.dense * share, dense_shard, g["dp_cp"], topo,
                                tr.distributed_optimizer, grad_bytes)
                       + _buckets(sp.expert * share, edp, g["edp"], topo,
                                  tr.distributed_optimizer, grad_bytes))
        buckets.append([[t for t, _ in chunk] for chunk in row])
        sizes.append([[b for _, b in chunk] for chunk in row])
        opt.append(optimizer_time(sp.dense / dense_shard + sp.expert / edp, topo.gpu))
        gather = 0.0
        if tr.distributed_optimizer:
            gather = collective_time("all_gather", sp.dense * PARAM_BYTES, g["dp_cp"], topo) \
                + collective_time("all_gather", sp.expert * PARAM_BYTES, g["edp"], topo)
        ag.append(gather)
        ag_bytes.append((sp.dense + sp.expert) * PARAM_BYTES if gather else 0.0)
    return EngineInput(
        schedule=build_schedule(p.pipeline_schedule, P, w.num_microbatches, V),
        fwd=fwd, bwd=bwd, p2p=np.full(P, p2p), dp_buckets=buckets,
        optimizer=np.array(opt), param_gather=np.array(ag),
        overlap_grad_reduce=tr.overlap_grad_reduce,
        overlap_param_gather=tr.overlap_param_gather,
        overlap_slowdown=topo.gpu.comm_overlap_slowdown, p2p_bytes=act if P > 1 else 0.0,
        dp_bucket_bytes=sizes, param_gather_bytes=np.array(ag_bytes))
