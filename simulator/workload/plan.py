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
from functools import cached_property

import numpy as np

from ..collectives import collective_time
from ..compute import BYTES, optimizer_time
from ..config.workload import Workload
from ..engine import EngineInput
from ..errors import ConfigError
from ..hardware import Placement, Topology
from ..memory.activations import activation_bytes_per_layer
from ..memory.states import weight_bytes
from ..moe import is_moe_layer
from .context import make_attention
from .cost import CostContext, Phase, TimedOp, cost_ops
from .layout import group_layout, strides
from .moe_layer import MoECost, MoEPart, add_ep_breakdown
from .moe_plan import ChunkBase, add_moe_parts
from .ops import (
    Op,
    backward_of,
    dims,
    embedding_forward,
    layer_forward,
    output_forward,
    recompute_ops,
)
from .params import StageParams
from .partition import Partition
from .shape import PlanShape, microbatch_runs, plan_shape, schedule_steps
from .wgrad import wgrad_time

GRAD_BYTES = 4  # fp32 gradient reduction (Megatron's default for bf16 training)
AXES = ("compute", "tp", "cp", "ep")


@dataclass(eq=False)  # holds numpy arrays: no value equality (nor its start-up cost)
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
    shape: PlanShape | None = None
    ep_breakdown: list[dict[str, float]] = field(default_factory=list)  # per stage, seconds


class _Builder:
    def __init__(self, w: Workload, topo: Topology):
        p, tr = w.parallelism, w.training
        self.w, self.topo = w, topo
        self.shape = plan_shape(w)
        self.part = self.shape.partition
        self.groups = group_layout(w, topo)
        x = dims(w)
        self.ctx = CostContext(topo=topo, groups=self.groups, dtype=tr.precision,
                               tp_overlap=tr.tp_comm_overlap and p.sequence_parallel,
                               attention=make_attention(w, topo, self.groups, x),
                               async_grad_allreduce=tr.async_tensor_model_parallel_allreduce)
        shared = w.model.moe.shared_expert_ffn_hidden_size if w.model.moe else 0
        # an MoE layer's ops without the routed experts: built once, read three times below
        moe_fwd = layer_forward(w, shared) if w.model.moe else []
        moe_bwd = backward_of(moe_fwd)
        self.moe_base = (self._layer(shared, moe_layer=True, ops=(moe_fwd, moe_bwd))
                         if w.model.moe else None)
        self.moe = MoECost(w, topo, self.groups, x.T, self.moe_base) if w.model.moe else None
        self.ep_parts: list[MoEPart] = []  # MoE parts of the last chunk() call
        self._collected: dict[tuple, tuple] = {}  # collect(): chunks alike
        self.rc = rc = tr.recompute_plan
        self.recompute_moe = rc.full or rc.has("moe")
        self.moe_plain_bwd = cost_ops(moe_bwd, self.ctx) if self.moe else None
        self.offload_layers = tr.cpu_offloading_num_layers if tr.cpu_offloading else 0
        self.offload = self._offload_waits(topo) if self.offload_layers else None
        emb, out = embedding_forward(w), output_forward(w)
        self.embed = (cost_ops(emb, self.ctx), cost_ops(backward_of(emb), self.ctx))
        self.output = (cost_ops(out, self.ctx), cost_ops(backward_of(out), self.ctx))
        # W (weight-gradient GEMMs) of each kind of block, for B/W-split schedules
        self.w_moe_base = wgrad_time(moe_fwd, self.ctx) if self.moe else 0.0
        self.w_output = wgrad_time(out, self.ctx)

    # The dense layer is costed on first use: a model whose layers are all MoE (Mixtral)
    # never reads it, and a search builds thousands of such plans.
    @cached_property
    def _dense_ops(self) -> tuple[list[Op], list[Op]]:
        fwd = layer_forward(self.w)
        return fwd, backward_of(fwd)

    @cached_property
    def dense(self) -> tuple[Phase, Phase]:
        return self._layer(None, ops=self._dense_ops)

    @cached_property
    def dense_plain_bwd(self) -> Phase:
        """Full recompute, block method: layers past recompute_num_layers keep their
        activations, so their backward re-runs nothing."""
        return cost_ops(self._dense_ops[1], self.ctx)

    @cached_property
    def w_dense(self) -> float:
        """W (weight-gradient GEMMs) of a dense layer, for B/W-split schedules."""
        return wgrad_time(self._dense_ops[0], self.ctx)

    def _layer(self, ffn: int | None, moe_layer: bool = False,
               ops: tuple[list[Op], list[Op]] | None = None) -> tuple[Phase, Phase]:
        """(forward, recompute + backward) of one layer; ``ops``: its forward and backward
        op lists when the caller has them already."""
        fwd, bwd = ops or (layer_forward(self.w, ffn), None)
        bwd = bwd if bwd is not None else backward_of(fwd)
        return (cost_ops(fwd, self.ctx),
                cost_ops(recompute_ops(self.w, fwd, moe_layer) + bwd, self.ctx))

    def _offload_waits(self, topo: Topology) -> tuple[Phase, Phase]:
        """Per offloaded layer, the time the compute stream waits on the host link.

        Megatron-Core's CPU offloading (Transformer Engine ``get_cpu_offload_context``)
        copies a layer's activations to the host on a side stream while the next layer
        computes, and back while the previous layer's backward runs: each copy of
        ``bytes / host_link`` seconds is hidden under one layer's forward (backward)
        and the rest stalls the compute stream. Units: seconds."""
        bw = topo.gpu.host_link_bandwidth
        if not bw:
            raise ConfigError("topology.gpu.host_link_GBps", None,
                              "is needed for training.cpu_offloading")
        copy = activation_bytes_per_layer(self.w) / bw
        out = []
        for name, hide in (("offload_d2h_wait", self.dense[0].duration),
                           ("offload_h2d_wait", self.dense[1].duration)):
            wait = max(0.0, copy - hide)
            out.append(Phase(duration=wait, compute=wait,
                             ops=[TimedOp(name, "compute", 0.0, wait, 0.0, 0.0)] if wait else []))
        return out[0], out[1]

    def _dense(self, f: Phase, b: Phase, redo: int, plain: int, ops: bool) -> None:
        """Append ``redo`` dense layers with recompute and ``plain`` without (none: nothing
        to add, so the dense layer need not be costed)."""
        if not redo + plain:
            return
        f.extend(self.dense[0], redo + plain, ops)
        b.extend(self.dense[1], redo, ops)
        if plain:
            b.extend(self.dense_plain_bwd, plain, ops)

    def chunk_kind(self, s: int, c: int) -> tuple[bool, bool, int] | None:
        """A key under which :meth:`chunk` gives the same phases for every (stage, chunk)
        that has it: without MoE layers or offloading, a chunk's costs depend only on
        whether it holds the embedding / the output and on its layer count (recompute
        goes by position in the chunk). None where they may depend on more."""
        if self.moe is not None or self.offload_layers:
            return None
        return self.shape.first(s, c), self.shape.last(s, c), len(self.shape.layer_ids(s, c))

    def collect(self, s: int, c: int, mb: int, first: bool, last: bool
                ) -> tuple[Phase, Phase, float, list[tuple[int, bool, bool]]]:
        """:meth:`chunk` in collect mode, and its MoE layers: the same phases (shared,
        read-only) for every chunk alike, i.e. with the same embedding / output, the same
        sequence of dense and MoE layers (recompute goes by position) and as many
        offloaded layers; only the MoE layer ids differ."""
        moe, ids = self.w.model.moe, self.shape.layer_ids(s, c)
        kinds = tuple(is_moe_layer(moe, layer) for layer in ids)
        key = (first, last, kinds, sum(layer < self.offload_layers for layer in ids))
        hit = self._collected.get(key)
        if hit is None:
            layers: list[tuple[int, bool, bool]] = []
            f, b, wg = self.chunk(s, c, mb, first, last, ops=False, moe_layers=layers)
            hit = self._collected[key] = (f, b, wg, [x[1:] for x in layers])
        f, b, wg, flags = hit
        m = self.w.model
        moe_ids = [layer for layer, k in zip(ids, kinds, strict=True) if k]
        if last:
            moe_ids += [layer for layer in range(m.num_layers, m.num_layers + m.mtp_num_layers)
                        if is_moe_layer(moe, layer)]
        return f, b, wg, [(layer, *x) for layer, x in zip(moe_ids, flags, strict=True)]

    def chunk(self, s: int, c: int, mb: int, first: bool, last: bool, ops: bool,
              moe_layers: list[tuple[int, bool, bool]] | None = None):
        """(forward, backward, W seconds) of chunk c on stage s for micro-batch mb.

        With a ``moe_layers`` list (collect mode, ``mb`` unused): the chunk without its
        routed-expert parts, which :mod:`.moe_plan` adds for every micro-batch at once;
        each MoE layer is appended as ``(layer, forward re-run in backward, counted in
        W)`` and the W seconds are returned before the ``min`` with the backward."""
        w = self.w
        f, b = Phase(), Phase()
        self.ep_parts = []
        wg = self.w_output if last else 0.0
        if first:
            f.extend(self.embed[0], ops=ops)
        if last:
            b.extend(self.output[1], ops=ops)
        dense_run = plain_run = 0
        for pos, layer in enumerate(self.shape.layer_ids(s, c)):
            redo = self.rc.layer_recomputed(pos) or not self.rc.full
            if self.moe is None or not is_moe_layer(w.model.moe, layer):
                dense_run += redo
                plain_run += not redo
                continue
            self._dense(f, b, dense_run, plain_run, ops)
            if dense_run + plain_run:  # none: the dense layer need not be costed
                wg += self.w_dense * (dense_run + plain_run)
            dense_run = plain_run = 0
            if moe_layers is not None:  # collect mode: the parts are added by moe_plan
                moe_layers.append((layer, self.recompute_moe and redo, True))
                wg += self.w_moe_base
                f.extend(self.moe_base[0], ops=ops)
                b.extend(self.moe_base[1] if redo else self.moe_plain_bwd, ops=ops)
                continue
            fp, bp = self.moe.part(layer, mb, False), self.moe.part(layer, mb, True)
            self.ep_parts += [fp, bp]
            wg += self.w_moe_base + bp.experts / 2
            f.extend(self.moe_base[0], ops=ops)
            f.extend(_moe_phase(fp, ops), ops=ops)
            b.extend(_moe_phase(bp, ops), ops=ops)
            if self.recompute_moe and redo:
                b.extend(_moe_phase(fp, ops), ops=ops)
            b.extend(self.moe_base[1] if redo else self.moe_plain_bwd, ops=ops)
        self._dense(f, b, dense_run, plain_run, ops)
        if dense_run + plain_run:  # none: the dense layer need not be costed
            wg += self.w_dense * (dense_run + plain_run)
        moved = sum(layer < self.offload_layers for layer in self.shape.layer_ids(s, c))
        if moved and self.offload is not None:
            f.extend(self.offload[0], moved, ops), b.extend(self.offload[1], moved, ops)
        if last:
            self._mtp(f, b, mb, ops, moe_layers)
            f.extend(self.output[0], ops=ops)
        if first:
            b.extend(self.embed[1], ops=ops)
        return f, b, wg if moe_layers is not None else min(wg, b.duration)

    def _mtp(self, f: Phase, b: Phase, mb: int, ops: bool,
             moe_layers: list[tuple[int, bool, bool]] | None) -> None:
        """Multi-token-prediction modules on the last chunk: each one more decoder layer
        of the last layer's kind and one more output layer + loss (DeepSeek-V3 sec. 2.2)."""
        m = self.w.model
        for k in range(m.mtp_num_layers):
            layer = m.num_layers + k
            if self.moe is not None and is_moe_layer(m.moe, layer) and moe_layers is not None:
                moe_layers.append((layer, False, False))  # collect mode: parts added by moe_plan
                f.extend(self.moe_base[0], ops=ops), b.extend(self.moe_base[1], ops=ops)
            elif self.moe is not None and is_moe_layer(m.moe, layer):
                fp, bp = self.moe.part(layer, mb, False), self.moe.part(layer, mb, True)
                self.ep_parts += [fp, bp]
                f.extend(self.moe_base[0], ops=ops), f.extend(_moe_phase(fp, ops), ops=ops)
                b.extend(_moe_phase(bp, ops), ops=ops), b.extend(self.moe_base[1], ops=ops)
            else:
                f.extend(self.dense[0], ops=ops), b.extend(self.dense[1], ops=ops)
            f.extend(self.output[0], ops=ops), b.extend(self.output[1], ops=ops)


def _moe_phase(part: MoEPart, ops: bool) -> Phase:
    ph = Phase(duration=part.duration, compute=part.compute,
               exposed={"tp": 0.0, "cp": 0.0, "ep": part.exposed_ep})
    if ops:
        ph.ops = [TimedOp("ep_dispatch", "ep", 0.0, part.dispatch, 0.0, 0.0),
                  TimedOp("experts", "compute", part.dispatch, part.experts, 0.0, 0.0),
                  TimedOp("ep_combine", "ep", part.dispatch + part.compute, part.combine,
                          0.0, 0.0)]
    return ph


def build_plan(w: Workload, topo: Topology, bound_only: bool = False, ops: bool = True) -> Plan:
    """Cost ``w`` on ``topo``. ``ops=False``: ``phases`` carry totals but no op timelines
    (only the trace and the timeline read them). ``bound_only``: for the search's lower
    bound (phase times, optimizer, schedule), also skip the DP buckets (the engine input
    then has none: do not replay it) and, with per-micro-batch router draws, the MoE
    chunks' phases, stage totals, EP breakdown and router imbalance."""
    ops = ops and not bound_only
    bld = _Builder(w, topo)
    p = w.parallelism
    P, V, M = p.pipeline, bld.shape.chunks, w.num_microbatches
    schedule = schedule_steps(bld.shape.schedule, P, M, p.vp)
    all_runs = microbatch_runs(bld.shape.schedule, P, M, p.vp)
    fwd, bwd, wgrad = np.zeros((P, V, M)), np.zeros((P, V, M)), np.zeros((P, V, M))
    fwd_ep, bwd_ep = np.zeros((P, V, M)), np.zeros((P, V, M))
    phases: dict[tuple[str, int, int], Phase] = {}
    totals = [dict.fromkeys(AXES, 0.0) for _ in range(P)]
    ep_totals: list[dict[str, float]] = [{} for _ in range(P)]
    # per micro-batch router draws (and MoE layers to draw for)
    varies = bld.moe is not None and not bld.moe.deterministic and bool(bld.moe.table.layer_row)
    pending: list[ChunkBase] = []
    costed: dict[tuple, tuple[Phase, Phase, float]] = {}  # chunks alike (read-only phases)
    for s in range(P):
        for c in range(V):
            first, last = bld.shape.first(s, c), bld.shape.last(s, c)
            mbs = list(all_runs[s][c])
            if varies:  # per micro-batch draws: the chunk without them, parts added below
                if ops:  # op timelines of the first micro-batch
                    phases[("F", s, c)], phases[("B", s, c)] = bld.chunk(s, c, mbs[0], first,
                                                                         last, ops=True)[:2]
                pending.append(ChunkBase(s, c, mbs, *bld.collect(s, c, mbs[0], first, last)))
                continue
            # a chunk that forwards every micro-batch: a basic slice (fancy indexing is slow)
            sl = slice(None) if len(mbs) == M else mbs
            kind = bld.chunk_kind(s, c)
            hit = costed.get(kind) if kind is not None else None
            if hit is None:
                hit = bld.chunk(s, c, mbs[0], first, last, ops=ops)
                if kind is not None:
                    costed[kind] = hit
            f, b, wg = hit
            phases[("F", s, c)], phases[("B", s, c)] = f, b
            fwd[s, c, sl], bwd[s, c, sl], wgrad[s, c, sl] = f.duration, b.duration, wg
            fwd_ep[s, c, sl], bwd_ep[s, c, sl] = f.exposed.get("ep", 0.0), \
                b.exposed.get("ep", 0.0)
            weight = len(mbs)
            for part in bld.ep_parts:
                add_ep_breakdown(ep_totals[s], part, weight)
            for ph in (f, b):
                totals[s]["compute"] += ph.compute * weight
                for axis in ("tp", "cp", "ep"):
                    totals[s][axis] += ph.exposed.get(axis, 0.0) * weight
    if pending:  # the bound reads the tables only: no totals, breakdown or phases then
        add_moe_parts(bld.moe, pending, (fwd, bwd, wgrad, fwd_ep, bwd_ep),
                      None if bound_only else totals, ep_totals,
                      None if ops or bound_only else phases)
    params = list(bld.shape.params)
    notes = [bld.part.note] if "even split" not in bld.part.note else []
    imbalance = {}
    if bld.ctx.attention is not None:
        imbalance["cp"] = bld.ctx.attention(None, False).imbalance
    if bld.moe is not None and not bound_only:
        imbalance.update(_moe_imbalance(bld.moe))
    return Plan(workload=w, topo=topo, partition=bld.part, groups=bld.groups, phases=phases,
                engine_input=_engine_input(w, topo, bld, schedule,
                                           (fwd, bwd, wgrad, fwd_ep, bwd_ep), params,
                                           not bound_only),
                stage_params=params, totals=totals, notes=notes, imbalance=imbalance,
                moe=bld.moe, shape=bld.shape,
                ep_breakdown=ep_totals if bld.moe is not None else [])


def _moe_imbalance(moe: MoECost) -> dict[str, float]:
    """Mean over every simulated (layer, micro-batch) draw of the router figures."""
    mean = moe.mean_imbalance()
    if not mean:
        return {}
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


def _engine_input(w: Workload, topo: Topology, bld: _Builder, schedule, tables,
                  params: list[StageParams], with_buckets: bool = True) -> EngineInput:
    p, tr = w.parallelism, w.training
    fwd, bwd, wgrad, fwd_ep, bwd_ep = tables
    sched = bld.shape.schedule
    g = bld.groups
    x = dims(w)
    P, V = p.pipeline, bld.shape.chunks
    act = x.Tn * x.h * x.e  # SP sends the sequence-parallel shard between stages
    p2p = collective_time("send_recv", act, g["pp"], topo) if P > 1 else 0.0
    dense_shard, edp = bld.shape.dense_shard, bld.shape.expert_shard
    buckets, sizes, opt, ag, ag_bytes = [], [], [], [], []
    grad_bytes = GRAD_BYTES if tr.grad_reduce_in_fp32 else BYTES["bf16"]
    # The distributed optimizer all-gathers the weights in the dtype the model holds them:
    # FP8 with fp8_param_gather (Megatron-Core: the TE weights are Float8Tensors and the
    # gather moves their 1-byte data), bf16 otherwise.
    wbytes = weight_bytes(tr)
    # Two model copies (DualPipe): each chunk's gradient is first summed with its twin's on
    # stage p-1-s, an all-reduce of two ranks placed as the farthest pipeline pair.
    twin = topo.place(2, strides(w)["pp"] * (P - 1)) \
        if sched.param_copies(P, p.vp) > 1 and P > 1 else None
    for s in range(P):
        sp = params[s]
        per_chunk = bld.part.layers[s]
        total_layers = max(1, sum(per_chunk))
        row: list[list[tuple[float, float]]] = [] if with_buckets else [[] for _ in range(V)]
        for c in range(V if with_buckets else 0):
            share = per_chunk[c] / total_layers
            pair = (sp.dense + sp.expert) * share * grad_bytes
            row.append(([(collective_time("all_reduce", pair, twin, topo), pair)] if twin else [])
                       + _buckets(sp.dense * share, dense_shard, g["dp_cp"], topo,
                                tr.distributed_optimizer, grad_bytes)
                       + _buckets(sp.expert * share, edp, g["edp"], topo,
                                  tr.distributed_optimizer, grad_bytes))
        buckets.append([[t for t, _ in chunk] for chunk in row])
        sizes.append([[b for _, b in chunk] for chunk in row])
        opt.append(optimizer_time(sp.dense / dense_shard + sp.expert / edp, topo.gpu))
        gather = 0.0
        if tr.distributed_optimizer:
            gather = collective_time("all_gather", sp.dense * wbytes, g["dp_cp"], topo) \
                + collective_time("all_gather", sp.expert * wbytes, g["edp"], topo)
        ag.append(gather)
        ag_bytes.append((sp.dense + sp.expert) * wbytes if gather else 0.0)
    return EngineInput(
        schedule=schedule, route=bld.shape.route, post_validation=sched.post_validation,
        wgrad=wgrad if sched.uses_w else None, fwd_ep=fwd_ep, bwd_ep=bwd_ep,
        fwd=fwd, bwd=bwd, p2p=np.full(P, p2p), dp_buckets=buckets,
        optimizer=np.array(opt), param_gather=np.array(ag),
        overlap_grad_reduce=tr.overlap_grad_reduce,
        overlap_param_gather=tr.overlap_param_gather,
        overlap_slowdown=topo.gpu.comm_overlap_slowdown, p2p_bytes=act if P > 1 else 0.0,
        dp_bucket_bytes=sizes, param_gather_bytes=np.array(ag_bytes))
