"""Predict each validation case with the simulator's own public machinery.

* step time: :func:`simulator.api.simulate_resolved` on the case's workload and topology;
* one layer: the layer's op list (:func:`simulator.workload.ops.layer_forward`,
  :func:`~simulator.workload.ops.recompute_ops`, :func:`~simulator.workload.ops.backward_of`)
  timed by :func:`simulator.workload.cost.cost_ops` with the case's group placements, exactly
  as a training step costs each layer (TP collectives exposed unless overlapped);
* collectives: :func:`simulator.collectives.collective_time` on ``topo.place(ranks, stride)``,
  reported as nccl-tests bus bandwidth (:func:`simulator.collectives.bus_bandwidth`);
* peak memory: :func:`simulator.memory.estimate_memory` for the logged stage (``"last"``:
  Megatron logs from the last rank, which sits on the last pipeline stage), less the
  framework allowance the allocator's peak does not see.

``topology_overrides`` (dotted paths, e.g. ``{"gpu.gemm_efficiency": 0.7}``) apply on top of a
case's own overrides; they are how calibration explores constants without editing files.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

from ..api import resolve, simulate_resolved
from ..collectives import bus_bandwidth, collective_time
from ..config import load_topology
from ..hardware import Topology
from ..memory import estimate_memory
from ..workload.cost import CostContext, cost_ops
from ..workload.layout import group_layout
from ..workload.moe.dispatch import deepep_bandwidth
from ..workload.ops import backward_of, layer_forward, recompute_ops
from .cases import Case

GB = 1e9


def _topo_overrides(case: Case, extra: dict[str, Any] | None) -> dict[str, Any]:
    return {**case.topology_overrides, **(extra or {})}


def _resolve_fitting(workload: dict, topology: str, overrides: dict[str, Any],
                     topology_overrides: dict[str, Any]) -> tuple[Any, Any] | None:
    """The resolved (workload, topology) of a variant of a case, or None where it would not
    fit in GPU memory (a published run ran, so such a variant is not one it could have
    been)."""
    w, t = resolve(workload, topology, overrides, topology_overrides)
    return (w, t) if estimate_memory(w, Topology.from_config(t)).fits else None


def predict_step_time(case: Case, topology_overrides: dict[str, Any] | None = None) -> float:
    """Simulated step time, s; for a case whose source searched its plan (``best_of``),
    at the best plan it could have found (:func:`best_plan`)."""
    if case.spec.get("best_of"):
        return best_plan(case, topology_overrides)[0]
    w, t = resolve(case.spec["workload"], case.topology, case.spec["overrides"],
                   _topo_overrides(case, topology_overrides))
    return float(simulate_resolved(w, t)[0].step_time_s)


def best_plan(case: Case, topology_overrides: dict[str, Any] | None = None
              ) -> tuple[float, str]:
    """Predicted step time (s) of ``case`` at the fastest per-token variant over its group's
    ``best_of`` grid (field -> values) that fits in memory, and that variant as a label.
    A source that ran "the best batch size and activation checkpointing" is predicted by the
    same search. Each variant runs one micro-batch per step (GBS = micro-batch x DP), as
    such a case does. Without ``best_of``: the case's own plan and an empty label."""
    grid = case.spec.get("best_of") or {}
    topo_over = _topo_overrides(case, topology_overrides)
    base, t = resolve(case.spec["workload"], case.topology, case.spec["overrides"], topo_over)
    if not grid:
        return float(simulate_resolved(base, t)[0].step_time_s), ""
    best, label = math.inf, ""
    keys = list(grid)
    for combo in itertools.product(*(grid[k] for k in keys)):
        over = {**case.spec["overrides"], **dict(zip(keys, combo, strict=True))}
        mbs = int(over.get("training.micro_batch_size", base.training.micro_batch_size))
        over["training.global_batch_size"] = mbs * base.parallelism.data
        fitting = _resolve_fitting(case.spec["workload"], case.topology, over, topo_over)
        if fitting is None:
            continue
        w, t = fitting
        tokens = w.training.global_batch_size * w.model.seq_length
        per_token = simulate_resolved(w, t)[0].step_time_s / tokens
        if per_token < best:
            best, label = per_token, ", ".join(f"{k.split('.')[-1]} {v}"
                                                for k, v in zip(keys, combo, strict=True))
    return best * base.training.global_batch_size * base.model.seq_length, label


def plausible_range(case: Case, topology_overrides: dict[str, Any] | None = None
                    ) -> list[tuple[str, float]]:
    """(label, predicted step time in s) for every alternative of the case's ``plausible``
    list (:func:`simulator.validation.cases.load_cases` expands a grid): the values its
    source leaves open (a recipe unknown such as the attention backend or the micro-batch
    size), each set over the case's own fields and predicted as the case is
    (:func:`best_plan` where the group searched its plan). Empty without one. The case's
    point prediction stays its stated assumption; the range shows how much of an error the
    unknowns could hold, and is never used to pick one. An alternative under which the run
    would not fit in memory is left out: the run ran."""
    out = []
    for alt in case.spec.get("plausible") or []:
        spec = {**case.spec, "overrides": {**case.spec["overrides"], **alt}}
        if not spec.get("best_of") and _resolve_fitting(  # best_plan keeps those that fit
                spec["workload"], case.topology, spec["overrides"],
                _topo_overrides(case, topology_overrides)) is None:
            continue
        pred = best_plan(replace(case, spec=spec), topology_overrides)[0]
        if not math.isfinite(pred):  # no variant of the search fits
            continue
        out.append((", ".join(f"{k.split('.')[-1]} {v}" for k, v in alt.items()), pred))
    return out


def layer_times(case: Case, topology_overrides: dict[str, Any] | None = None
                ) -> tuple[float, float]:
    """(forward, backward) seconds of one decoder layer; backward includes recompute."""
    w, t = resolve(case.spec["workload"], case.topology, case.spec["overrides"],
                   _topo_overrides(case, topology_overrides))
    topo = Topology.from_config(t)
    p, tr = w.parallelism, w.training
    ctx = CostContext(topo=topo, groups=group_layout(w, topo), dtype=tr.precision,
                      tp_overlap=tr.tp_comm_overlap and p.sequence_parallel)
    fwd = layer_forward(w)
    f = cost_ops(fwd, ctx)
    b = cost_ops(recompute_ops(w, fwd) + backward_of(fwd), ctx)
    return f.duration, b.duration


def predict_layer_time(case: Case, topology_overrides: dict[str, Any] | None = None) -> float:
    f, b = layer_times(case, topology_overrides)
    return f if case.spec["phase"] == "fwd" else b


def predicted_busbw(topology: str, op: str, ranks: int, nbytes: float, stride: int = 1,
                    algo: str | None = None, topology_overrides: dict[str, Any] | None = None
                    ) -> float:
    """nccl-tests bus bandwidth the model predicts, GB/s."""
    topo = Topology.from_config(load_topology(topology, topology_overrides or {}))
    seconds = collective_time(op, nbytes, topo.place(ranks, stride), topo, algo)
    return bus_bandwidth(op, nbytes, ranks, seconds) / GB


def predict_busbw(case: Case, topology_overrides: dict[str, Any] | None = None) -> float:
    s = case.spec
    return predicted_busbw(case.topology, s["op"], s["ranks"], s["bytes"], s["stride"],
                           s["algo"], _topo_overrides(case, topology_overrides))


def predict_ep_alltoall(case: Case, topology_overrides: dict[str, Any] | None = None) -> float:
    """DeepEP dispatch / combine bandwidth in DeepEP's own metric, GB/s
    (:func:`simulator.workload.moe.dispatch.deepep_bandwidth`); NCCL busbw without a
    ``deepep`` block."""
    s = case.spec
    if not s.get("deepep"):
        return predict_busbw(case, topology_overrides)
    d = s["deepep"]
    topo = Topology.from_config(load_topology(case.topology,
                                              _topo_overrides(case, topology_overrides)))
    return deepep_bandwidth(s["ranks"], int(d["ranks_per_node"]), int(d["topk"]),
                            d.get("max_nodes_per_token"), topo) / GB


def predict_peak_memory(case: Case, topology_overrides: dict[str, Any] | None = None) -> float:
    """Allocator peak of the case's stage, decimal GB (stage total less the framework)."""
    w, t = resolve(case.spec["workload"], case.topology, case.spec["overrides"],
                   _topo_overrides(case, topology_overrides))
    report = estimate_memory(w, Topology.from_config(t))
    stage = case.spec["stage"]
    st = report.stages[-1] if stage == "last" else report.stages[int(stage)]
    return (st.total - st.framework) / GB


PREDICTORS = {
    "dense_step_time": predict_step_time,
    "moe_step_time": predict_step_time,
    "layer_time": predict_layer_time,
    "collective_busbw": predict_busbw,
    "ep_alltoall": predict_ep_alltoall,
    "peak_memory": predict_peak_memory,
}


def predict(case: Case, topology_overrides: dict[str, Any] | None = None) -> float:
    """The simulator's prediction for ``case``, in the case's unit."""
    return PREDICTORS[case.category](case, topology_overrides)
