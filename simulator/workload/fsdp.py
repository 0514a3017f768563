"""Megatron-FSDP's per-micro-batch collectives, folded into the phase tables.

With sharded gradients (``optim_grads``, ZeRO-2) or sharded weights as well
(``optim_grads_params``, ZeRO-3), Megatron-FSDP does not keep a full gradient buffer to
reduce once per step: every backward reduce-scatters its gradients into the rank's
shard, and with ZeRO-3 every forward and every backward first all-gathers the weights it
is about to use (Megatron-Core ``megatron/core/distributed/fsdp/src/README.md``:
``optim_grads`` "shards gradients and optimizer states", ``optim_grads_params`` also "the
training parameters"; ``overlap_grad_reduce`` / ``overlap_param_gather`` overlap them
with the backward and forward "with asynchronous calls and pre-fetching"; Rajbhandari et
al. 2020, "ZeRO", Sections 5.2-5.3 and 7: ZeRO-3 moves 1.5x the bytes of ZeRO-2).

The unit of sharding is a transformer layer (Megatron-Core's ``fsdp_unit_modules``; the
embedding and the output layer count as one more unit each). A phase of ``L`` units and
``T`` seconds of compute is a two-stage pipeline: the gather of unit ``i + 1`` runs
while unit ``i`` computes, and the reduce-scatter of unit ``i`` while unit ``i - 1``
computes, all FSDP traffic of the rank on one data-parallel link. With per-unit
all-gather ``a`` and reduce-scatter ``r`` (seconds, :func:`simulator.collectives.
collective_time` of one unit's bytes over the data x context group, expert weights over
expert-DP) and ``x = T / L``, the phase takes

    T' = a + (L - 1) * max(a + r, x) + x + r

(the first gather and the last reduce-scatter are exposed; in between, the slower of
communication and compute paces each unit). Forward: ``r = 0``, ``a = 0`` without
ZeRO-3. The compute beside the traffic runs ``gpu.comm_overlap_slowdown`` slower for
the overlapped time, ``min(L * (a + r), T)``, as the engine charges the DDP buckets
(Hong et al. 2025, arXiv:2507.03114). Both parts go to the step's exposed DP time.

HSDP (``num_distributed_optimizer_instances`` = k): the gathers and reduce-scatters run
inside one instance (``DP*CP/k`` ranks), and the last micro-batch's backward also
all-reduces each unit's gradient shard across the k instances (reduce-scatters it under
HFSDP, ``outer_dp_sharding_strategy: optim``), on a stream of its own behind the
reduce-scatter (Megatron-FSDP ``megatron_fsdp.py``: ``outer_fsdp_group_grad_reduce`` only
``is_last_microbatch``; ``param_and_grad_buffer.py`` ``outer_fsdp_group_grad_reduce_stream``),
so that phase's ``r`` is the sum of both.

What is not modelled: a backward split into B and W (zero-bubble schedules) gets its
reduce-scatters with the B phase; the FSDP traffic does not contend with the pipeline's
point-to-point sends. Seconds throughout.
"""

from __future__ import annotations

import numpy as np

from ..collectives import collective_time
from ..config.workload import Workload
from ..hardware import Placement, Topology
from ..memory.states import weight_bytes
from ..shape.plan_shape import PlanShape
from .step_input import grad_comm_bytes


def units(shape: PlanShape, stage: int, chunk: int) -> int:
    """FSDP units of a chunk: its decoder layers, plus the embedding and the output layer
    where the chunk holds them."""
    n = len(shape.layer_ids(stage, chunk))
    return max(1, n + shape.first(stage, chunk) + shape.last(stage, chunk))


def unit_collectives(w: Workload, topo: Topology, shape: PlanShape,
                     groups: dict[str, Placement], stage: int, chunk: int
                     ) -> tuple[float, float, float]:
    """(all-gather, reduce-scatter, outer reduction) seconds of one FSDP unit of (stage,
    chunk): the chunk's weights (or gradients) over its units, dense over DP x CP, expert
    over expert-DP (inside one optimizer instance under HSDP); 0 where the strategy does
    not shard them. The outer reduction (HSDP only, last micro-batch) all-reduces the
    unit's gradient shard across the instances, or reduce-scatters it under HFSDP."""
    tr = w.training
    sp = shape.params[stage]
    per_chunk = shape.partition.layers[stage]
    share = per_chunk[chunk] / max(1, sum(per_chunk)) / units(shape, stage, chunk)
    dense, expert = sp.dense * share, sp.expert * share
    gather = reduce = outer = 0.0
    dense_in, expert_in = groups["dp_cp_intra"], groups["edp_intra"]
    if tr.params_sharded:
        wb = weight_bytes(tr)
        gather = collective_time("all_gather", dense * wb, dense_in, topo) \
            + collective_time("all_gather", expert * wb, expert_in, topo)
    if tr.grads_sharded:
        gb = grad_comm_bytes(w)
        reduce = collective_time("reduce_scatter", dense * gb, dense_in, topo) \
            + collective_time("reduce_scatter", expert * gb, expert_in, topo)
        op = "reduce_scatter" if tr.outer_dp_sharding_strategy == "optim" else "all_reduce"
        outer = collective_time(op, dense * gb / dense_in.size, groups["dp_cp_inter"], topo) \
            + collective_time(op, expert * gb / expert_in.size, groups["edp_inter"], topo)
    return gather, reduce, outer


def pipelined(compute: np.ndarray, n: int, gather: float, reduce: float, slowdown: float
              ) -> np.ndarray:
    """Seconds the FSDP traffic adds to phases of ``compute`` seconds (array) over ``n``
    units: ``a + (n-1) max(a+r, x) + x + r - T`` plus the overlap slowdown (module
    docstring). Zero where the phase does not run (``compute`` 0) or nothing moves."""
    comm = gather + reduce
    if comm <= 0:
        return np.zeros_like(compute)
    x = compute / n
    total = gather + (n - 1) * np.maximum(comm, x) + x + reduce
    extra = total - compute + slowdown * np.minimum(n * comm, compute)
    return np.where(compute > 0, extra, 0.0)


def add_fsdp_traffic(w: Workload, topo: Topology, shape: PlanShape,
                     groups: dict[str, Placement], fwd: np.ndarray, bwd: np.ndarray,
                     totals: list[dict[str, float]] | None
                     ) -> tuple[np.ndarray, np.ndarray] | None:
    """Add the per-micro-batch FSDP collectives to the ``[stage, chunk, micro-batch]``
    forward and backward tables in place, and their exposed seconds to each stage's
    ``totals["dp"]`` (when given). Returns the seconds added (forward, backward tables;
    the trace shows them), or None without sharded gradients, which adds nothing."""
    tr = w.training
    if not tr.grads_sharded:
        return None
    added = (np.zeros_like(fwd), np.zeros_like(bwd))
    slowdown = topo.gpu.comm_overlap_slowdown
    for s in range(fwd.shape[0]):
        for c in range(fwd.shape[1]):
            n = units(shape, s, c)
            gather, reduce, outer = unit_collectives(w, topo, shape, groups, s, c)
            f = pipelined(fwd[s, c], n, gather, 0.0, slowdown)
            b = pipelined(bwd[s, c], n, gather, reduce, slowdown)
            runs = np.flatnonzero(bwd[s, c])
            if outer > 0 and runs.size:  # HSDP: the chunk's last backward also reduces outer
                last = runs[-1]
                b[last] = pipelined(bwd[s, c, last:last + 1], n, gather, reduce + outer,
                                    slowdown)[0]
            fwd[s, c] += f
            bwd[s, c] += b
            added[0][s, c], added[1][s, c] = f, b
            if totals is not None:
                totals[s]["dp"] = totals[s].get("dp", 0.0) + float(f.sum() + b.sum())
    return added
