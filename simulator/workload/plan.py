"""Assemble a workload on a topology into the engine's input.

For every pipeline stage and model chunk this costs the forward and backward
phases (embedding on the first chunk of stage 0, output layer and loss on the
last chunk of the last stage, identical decoder layers in between, counted
once and repeated), the p2p transfer per micro-batch, the gradient buckets and
the optimizer step.
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
from ..schedules import build_schedule
from .context import make_attention
from .cost import CostContext, Phase, cost_ops
from .layout import group_layout
from .ops import (backward_of, dims, embedding_forward, layer_forward, output_forward,
                  recompute_ops)
from .params import dense_layer_params, embedding_params
from .partition import Partition, partition_layers

GRAD_BYTES = 4  # fp32 gradient reduction (Megatron --accumulate-allreduce-grads-in-fp32)
PARAM_BYTES = BYTES["bf16"]


@dataclass
class Plan:
    """Everything the engine and the metrics need for one configuration."""

    workload: Workload
    topo: Topology
    partition: Partition
    groups: dict[str, Placement]
    phases: dict[tuple[str, int, int], Phase]  # (phase, stage, chunk) -> cost
    engine_input: EngineInput
    stage_params: list[float]
    notes: list[str]
    imbalance: dict[str, float] = field(default_factory=dict)


def _layer_phases(w: Workload, ctx: CostContext) -> tuple[Phase, Phase]:
    fwd = layer_forward(w)
    return cost_ops(fwd, ctx), cost_ops(recompute_ops(w, fwd) + backward_of(fwd), ctx)


def _chunk_phases(w: Workload, ctx: CostContext, layers: int, first: bool, last: bool,
                  layer: tuple[Phase, Phase]) -> tuple[Phase, Phase]:
    fwd, bwd = Phase(), Phase()
    if first:
        fwd.extend(cost_ops(embedding_forward(w), ctx))
    fwd.extend(layer[0], layers)
    if last:
        out = output_forward(w)
        fwd.extend(cost_ops(out, ctx))
        bwd.extend(cost_ops(backward_of(out), ctx))
    bwd.extend(layer[1], layers)
    if first:
        bwd.extend(cost_ops(backward_of(embedding_forward(w)), ctx))
    return fwd, bwd


def _buckets(params: float, dp: int, group: Placement, topo: Topology, dist_opt: bool
             ) -> list[float]:
    """Gradient-sync time (s) of each DDP bucket of a chunk holding ``params`` elements.

    Megatron-Core DDP buckets hold ``max(40e6, 1e6 * dp)`` parameters; each is
    reduce-scattered (distributed optimizer) or all-reduced in fp32.
    """
    if group.size <= 1 or params <= 0:
        return []
    size = max(40e6, 1e6 * dp)
    n = max(1, math.ceil(params / size))
    op = "reduce_scatter" if dist_opt else "all_reduce"
    t = collective_time(op, params / n * GRAD_BYTES, group, topo)
    return [t] * n


def build_plan(w: Workload, topo: Topology) -> Plan:
    p, tr = w.parallelism, w.training
    part = partition_layers(w)
    groups = group_layout(w, topo)
    ctx = CostContext(topo=topo, groups=groups, dtype=tr.precision,
                      tp_overlap=tr.tp_comm_overlap and p.sequence_parallel,
                      attention=make_attention(w, topo, groups, dims(w)))
    layer = _layer_phases(w, ctx)
    P, V, M = p.pipeline, p.vp, w.num_microbatches
    fwd, bwd = np.zeros((P, V, M)), np.zeros((P, V, M))
    phases: dict[tuple[str, int, int], Phase] = {}
    buckets: list[list[list[float]]] = []
    stage_params: list[float] = []
    tied = not w.model.untie_embeddings_and_output_weights
    for s in range(P):
        row, total = [], 0.0
        for c in range(V):
            first, last = s == 0 and c == 0, s == P - 1 and c == V - 1
            f, b = _chunk_phases(w, ctx, part.layers[s][c], first, last, layer)
            phases[("F", s, c)], phases[("B", s, c)] = f, b
            fwd[s, c, :], bwd[s, c, :] = f.duration, b.duration
            params = part.layers[s][c] * dense_layer_params(w)
            params += embedding_params(w) * (first + (last and (not tied or P > 1)))
            total += params
            row.append(_buckets(params, p.data * p.context, groups["dp_cp"], topo,
                                tr.distributed_optimizer))
        if tied and P > 1 and s in (0, P - 1):
            pair = topo.place(2, max(1, groups["pp"].stride * (P - 1)))
            row[0 if s == 0 else V - 1].append(
                collective_time("all_reduce", embedding_params(w) * GRAD_BYTES, pair, topo))
        buckets.append(row)
        stage_params.append(total)
    notes = [part.note] if "even split" not in part.note else []
    imbalance = {}
    if ctx.attention is not None:
        imbalance["cp"] = ctx.attention(None, False).imbalance
    return Plan(workload=w, topo=topo, partition=part, groups=groups, phases=phases,
                engine_input=_engine_input(w, topo, groups, fwd, bwd, buckets, stage_params),
                stage_params=stage_params, notes=notes, imbalance=imbalance)


def _engine_input(w: Workload, topo: Topology, groups: dict[str, Placement], fwd, bwd,
                  buckets, stage_params) -> EngineInput:
    p, tr = w.parallelism, w.training
    x = dims(w)
    act = x.Tn * x.h * x.e  # SP sends the sequence-parallel shard between stages
    p2p = collective_time("send_recv", act, groups["pp"], topo) if p.pipeline > 1 else 0.0
    shard = p.data * p.context if tr.distributed_optimizer else 1
    opt = np.array([optimizer_time(n / shard, topo.gpu) for n in stage_params])
    if tr.distributed_optimizer and shard > 1:
        ag = np.array([collective_time("all_gather", n * PARAM_BYTES, groups["dp_cp"], topo)
                       for n in stage_params])
    else:
        ag = np.zeros(p.pipeline)
    return EngineInput(
        schedule=build_schedule(p.pipeline_schedule, p.pipeline, w.num_microbatches, p.vp),
        fwd=fwd, bwd=bwd, p2p=np.full(p.pipeline, p2p), dp_buckets=buckets,
        optimizer=opt, param_gather=ag, overlap_grad_reduce=tr.overlap_grad_reduce,
        overlap_param_gather=tr.overlap_param_gather)
