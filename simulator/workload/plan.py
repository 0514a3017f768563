"""Assemble a workload on a topology into the engine's input.

For every pipeline stage and model chunk, :mod:`.chunk_cost` costs the forward and
backward phases (embedding on the first chunk of stage 0, output layer and loss on the
last chunk of the last stage, decoder layers in between). MoE layers add a
routed-expert part that depends on the router's draw for that layer and micro-batch,
so phase durations may differ per micro-batch (``fwd[s, c, mb]``); with draws that
vary, :mod:`.moe.plan` adds those parts for every micro-batch at once. The tables,
per-stage totals and the EP breakdown are filled here, then Megatron-FSDP's per-micro-batch
collectives (:mod:`.fsdp`); :mod:`.step_input` adds the
p2p transfer per micro-batch, the gradient buckets and the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config.stacks import run_stack
from ..config.workload import Workload
from ..engine import EngineInput
from ..hardware import Placement, Topology
from ..shape.params import StageParams
from ..shape.partition import Partition
from ..shape.plan_shape import PlanShape, microbatch_runs, schedule_steps
from .blocking_p2p import add_blocking_sends
from .chunk_cost import ChunkCoster
from .cost import Phase
from .fsdp import add_fsdp_traffic
from .moe.layer import MoECost
from .moe.part import add_ep_breakdown
from .moe.plan import ChunkBase, add_moe_parts
from .step_input import engine_input

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
    # per stage: compute / tp / cp / ep seconds, all phases; "dp": Megatron-FSDP's
    # per-micro-batch traffic exposed inside them (workload/fsdp.py)
    totals: list[dict[str, float]]
    notes: list[str]
    imbalance: dict[str, float] = field(default_factory=dict)
    moe: MoECost | None = None
    shape: PlanShape | None = None
    ep_breakdown: list[dict[str, float]] = field(default_factory=list)  # per stage, seconds
    # Megatron-FSDP's exposed seconds in each forward / backward phase (workload/fsdp.py)
    fsdp_exposed: tuple[np.ndarray, np.ndarray] | None = None
    # per stage, seconds of the whole step: the FSDP part of the exposed "dp" time apart
    # (simulator.workload.fsdp.FSDP_KEYS); empty without sharded gradients
    fsdp_breakdown: list[dict[str, float]] = field(default_factory=list)


def build_plan(w: Workload, topo: Topology, bound_only: bool = False, ops: bool = True) -> Plan:
    """Cost ``w`` on ``topo``. ``ops=False``: ``phases`` carry totals but no op timelines
    (only the trace and the timeline read them). ``bound_only``: for the search's lower
    bound (phase times, optimizer, schedule), also skip the DP buckets (the engine input
    then has none: do not replay it) and, with per-micro-batch router draws, the MoE
    chunks' phases, stage totals, EP breakdown and router imbalance."""
    ops = ops and not bound_only
    bld = ChunkCoster(w, topo)
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
    costed: dict[tuple, tuple] = {}  # chunks alike (read-only phases)
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
            if hit is None:  # the chunk's phases and its MoE parts (for the EP breakdown)
                hit = (bld.chunk(s, c, mbs[0], first, last, ops=ops), list(bld.ep_parts))
                if kind is not None:
                    costed[kind] = hit
            (f, b, wg), ep_parts = hit
            phases[("F", s, c)], phases[("B", s, c)] = f, b
            fwd[s, c, sl], bwd[s, c, sl], wgrad[s, c, sl] = f.duration, b.duration, wg
            fwd_ep[s, c, sl], bwd_ep[s, c, sl] = f.exposed.get("ep", 0.0), \
                b.exposed.get("ep", 0.0)
            weight = len(mbs)
            for part in ep_parts:
                add_ep_breakdown(ep_totals[s], part, weight)
            for ph in (f, b):
                totals[s]["compute"] += ph.compute * weight
                for axis in ("tp", "cp", "ep"):
                    totals[s][axis] += ph.exposed.get(axis, 0.0) * weight
    if pending:  # the bound reads the tables only: no totals, breakdown or phases then
        add_moe_parts(bld.moe, pending, (fwd, bwd, wgrad, fwd_ep, bwd_ep),
                      None if bound_only else totals, ep_totals,
                      None if ops or bound_only else phases)
    engine = scale_pipeline_phases(w, (fwd, bwd, wgrad, fwd_ep, bwd_ep),
                                   None if bound_only else totals)
    fsdp_totals: list[dict[str, float]] = [{} for _ in range(P)]
    fsdp = add_fsdp_traffic(w, topo, bld.shape, bld.groups, fwd, bwd,
                            None if bound_only else totals, fsdp_totals)
    add_blocking_sends(w, topo, bld.shape, bld.groups, fwd, bwd, None if bound_only else totals)
    params = list(bld.shape.params)
    notes = [bld.part.note] if "even split" not in bld.part.note else []
    if engine != 1.0:
        notes.append(f"pipeline runtime: every forward and backward phase x{engine:.3f}, the "
                     f"{w.training.stack} profile's efficiency.pipeline_engine (fitted on its "
                     f"published pipelined runs; counted as compute)")
    imbalance = {}
    if bld.ctx.attention is not None:
        imbalance["cp"] = bld.ctx.attention(None, False).imbalance
    if bld.moe is not None and not bound_only:
        imbalance.update(_moe_imbalance(bld.moe))
    inp = engine_input(w, topo, bld.shape, bld.groups, schedule,
                       (fwd, bwd, wgrad, fwd_ep, bwd_ep), params, not bound_only)
    if P > 1 and run_stack(w.training).pipeline_lockstep:
        notes.append("pipeline runtime: PyTorch's lock-step time slots, each slot waiting for "
                     "its transfers (pipeline.lockstep)" if inp.lockstep is not None else
                     f"pipeline runtime: the stack waits slot by slot (pipeline.lockstep), but "
                     f"PyTorch has no slot table for schedule {p.pipeline_schedule} here: "
                     f"replayed asynchronously")
    return Plan(workload=w, topo=topo, partition=bld.part, groups=bld.groups, phases=phases,
                engine_input=inp,
                stage_params=params, totals=totals, notes=notes, imbalance=imbalance,
                moe=bld.moe, shape=bld.shape,
                ep_breakdown=ep_totals if bld.moe is not None else [], fsdp_exposed=fsdp,
                fsdp_breakdown=fsdp_totals if fsdp is not None else [])


def scale_pipeline_phases(w: Workload, tables: tuple[np.ndarray, ...],
                          totals: list[dict[str, float]] | None) -> float:
    """Scale the phase tables of a pipelined run (in place) by its stack's fitted
    ``efficiency.pipeline_engine`` and add the seconds this adds to each stage's
    ``totals["compute"]``; returns the factor (1.0: nothing done).

    The factor is empirical: the stack's pipeline runtime measured slower per phase than the
    simulator's kernels on the same layers, for a reason the model does not itself
    represent (stacks/*.yaml ``efficiency``, each value with the runs it was fitted on and
    the command that fits it, ``python -m simulator.validation.stacks --fit-stack``). It
    applies to the whole phase (kernels and the TP / CP / EP time inside it), before the
    FSDP traffic and the blocking pipeline transfers, which are costed apart. Seconds.
    """
    factor = run_stack(w.training).efficiency.get("pipeline_engine", 1.0) \
        if w.parallelism.pipeline > 1 else 1.0
    if factor == 1.0:
        return 1.0
    fwd, bwd = tables[:2]  # a backward's seconds include its weight-gradient part
    if totals is not None:
        for s, tot in enumerate(totals):
            tot["compute"] += (factor - 1.0) * float(fwd[s].sum() + bwd[s].sum())
    for table in tables:
        table *= factor
    return factor


def _moe_imbalance(moe: MoECost) -> dict[str, float]:
    """Mean over every simulated (layer, micro-batch) draw of the router figures."""
    mean = moe.mean_imbalance()
    if not mean:
        return {}
    return {"ep_expert_max_over_mean": mean["expert_max_over_mean"],
            "ep_rank_max_over_mean": mean["rank_max_over_mean"],
            "ep_dropped_fraction": mean["dropped_fraction"],
            "ep_balance_loss": mean["balance_loss"]}
