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
HFSDP, ``outer_dp_sharding_strategy: optim``), on a stream of its own that waits for the
unit's reduce-scatter (Megatron-FSDP ``megatron_fsdp.py``: ``outer_fsdp_group_grad_reduce``
only ``is_last_microbatch``, ``hsdp_all_reduce_stream.wait_stream(reduce_scatter_stream)``;
PyTorch FSDP1 ``torch/distributed/fsdp/_runtime_utils.py`` ``_reduce_grad``: HYBRID_SHARD's
``all_reduce`` on ``state._all_reduce_stream`` after ``wait_stream(_post_backward_stream)``;
FSDP2 ``_fully_shard/_fsdp_collectives.py`` ``foreach_reduce``: ``all_reduce_stream.wait_stream(
reduce_scatter_stream)``, then the all-reduce on it).
Where the instance sits inside one scale-up domain (NVLink) and the outer group crosses
them, the two streams use different links, so unit ``i``'s outer reduction ``o`` runs
beside unit ``i + 1``'s reduce-scatter: a third pipeline stage,

    T' = a + (L - 1) * max(a + r, o, x) + x + r + o

(paced by the slowest of the in-domain link, the inter-domain link and the compute; the
last unit's reduce-scatter and outer reduction are exposed). Where the instance itself
spans domains (both reductions share the NICs), or the outer group stays inside one (both
share the GPU's NVLink ports), that phase's ``r`` is their sum (:func:`outer_apart`).

Other stacks (``training.stack``, stacks/*.yaml ``fsdp``) run the same pipeline with
their own rules: ``units_per_layer`` (DeepSpeed ZeRO-3 fetches and releases each
submodule separately, so a layer is several smaller units, each paying its collective's
latency); ``prefetch_depth`` 0 (no prefetch: every gather waits in line before its
unit's compute, ``T' = L (a + x) + r``); ``reshard_after_forward`` false (the forward's
gathered weights stay until the backward: no backward all-gather, more memory);
``reduce_dtype`` (FSDP2 in torchtitan reduce-scatters fp32 gradients, 4 B per element);
FP8 all-gather (torchao float8 weights gathered at 1 B); ``sync_once_per_schedule`` under
pipeline parallelism (PyTorch pipelining: gradients accumulate unsharded over the
schedule's micro-batches and are reduce-scattered after the last backward, in line; kept
weights gathered once, :func:`_schedule_traffic`); and the copy kernels around the
collectives on the compute stream (FSDP2's all-gather copy-out and reduce-scatter
copy-in, ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``), costed as HBM
traffic (:func:`simulator.compute.memory_time`) per gathered or reduced parameter.

What is not modelled: a backward split into B and W (zero-bubble schedules) gets its
reduce-scatters with the B phase; the FSDP traffic does not contend with the pipeline's
point-to-point sends. Seconds throughout.
"""

from __future__ import annotations

import numpy as np

from ..collectives import collective_time
from ..compute import memory_time
from ..config.stacks import Stack, run_stack
from ..config.workload import Workload
from ..hardware import Placement, Topology
from ..memory.states import weight_bytes
from ..precision import DTYPE_BYTES
from ..shape.plan_shape import PlanShape
from .step_input import grad_comm_bytes


def units(shape: PlanShape, stage: int, chunk: int, per_layer: int = 1) -> int:
    """FSDP units of a chunk: its decoder layers (``per_layer`` units each), plus the
    embedding and the output layer where the chunk holds them."""
    n = len(shape.layer_ids(stage, chunk)) * per_layer
    return max(1, n + shape.first(stage, chunk) + shape.last(stage, chunk))


def gathered_bytes(w: Workload, stack: Stack) -> float:
    """Bytes per gathered weight: FP8 under FP8 parameters or the stack's FP8 all-gather."""
    tr = w.training
    if stack.float8_all_gather and tr.precision_type.scaled:
        return tr.precision_type.element_bytes
    return weight_bytes(tr)


def reduced_bytes(w: Workload, stack: Stack) -> float:
    """Bytes per reduce-scattered gradient: the stack's reduce dtype, else the workload's."""
    if stack.reduce_dtype is not None:
        return DTYPE_BYTES[stack.reduce_dtype]
    return grad_comm_bytes(w)


def unit_collectives(w: Workload, topo: Topology, shape: PlanShape,
                     groups: dict[str, Placement], stage: int, chunk: int
                     ) -> tuple[float, float, float]:
    """(all-gather, reduce-scatter, outer reduction) seconds of one FSDP unit of (stage,
    chunk): the chunk's weights (or gradients) over its units, dense over DP x CP, expert
    over expert-DP (inside one optimizer instance under HSDP); 0 where the strategy does
    not shard them. The outer reduction (HSDP only, last micro-batch) all-reduces the
    unit's gradient shard across the instances, or reduce-scatters it under HFSDP."""
    tr = w.training
    stack = run_stack(tr)
    sp = shape.params[stage]
    per_chunk = shape.partition.layers[stage]
    share = per_chunk[chunk] / max(1, sum(per_chunk)) / units(
        shape, stage, chunk, stack.fsdp_units_per_layer)
    dense, expert = sp.dense * share, sp.expert * share
    trained = sp.trainable  # the gradients reduced (all weights gathered; LoRA's base frozen)
    t_dense, t_expert = trained.dense * share, trained.expert * share
    gather = reduce = outer = 0.0
    dense_in, expert_in = groups["dp_cp_intra"], groups["edp_intra"]
    if tr.params_sharded:
        wb = gathered_bytes(w, stack)
        gather = collective_time("all_gather", dense * wb, dense_in, topo) \
            + collective_time("all_gather", expert * wb, expert_in, topo)
    if tr.grads_sharded:
        gb = reduced_bytes(w, stack)
        reduce = collective_time("reduce_scatter", t_dense * gb, dense_in, topo) \
            + collective_time("reduce_scatter", t_expert * gb, expert_in, topo)
        op = "reduce_scatter" if tr.outer_dp_sharding_strategy == "optim" else "all_reduce"
        outer = collective_time(op, t_dense * gb / dense_in.size, groups["dp_cp_inter"], topo) \
            + collective_time(op, t_expert * gb / expert_in.size, groups["edp_inter"], topo)
    return gather, reduce, outer


def outer_apart(groups: dict[str, Placement]) -> bool:
    """Whether HSDP's outer reduction runs on a link of its own: every rank of one
    optimizer instance (dense and expert) inside one scale-up domain, so the instance's
    reduce-scatters stay on NVLink, while the outer group crosses domains (an outer group
    inside the domain shares the GPU's NVLink ports with them: in line; module
    docstring)."""
    inner = groups["dp_cp_intra"].span == 0 and groups["edp_intra"].span == 0
    return inner and groups["dp_cp_inter"].span > 0


def pipelined(compute: np.ndarray, n: int, gather: float, reduce: float, slowdown: float,
              prefetch: int = 1, outer: float = 0.0) -> np.ndarray:
    """Seconds the FSDP traffic adds to phases of ``compute`` seconds (array) over ``n``
    units: ``a + (n-1) max(a+r, o, x) + x + r + o - T`` plus the overlap slowdown (module
    docstring; ``o`` = ``outer``, the HSDP outer reduction on a link of its own, else 0);
    without prefetch (``prefetch`` 0) ``n a + (n-1) max(r, o, x) + x + r + o - T``, the
    gathers in line and only the reductions beside the next unit. Zero where the phase does
    not run (``compute`` 0) or nothing moves. The two parts apart: :func:`pipelined_parts`."""
    exposed, slowed = pipelined_parts(compute, n, gather, reduce, slowdown, prefetch, outer)
    return exposed + slowed


def pipelined_parts(compute: np.ndarray, n: int, gather: float, reduce: float,
                    slowdown: float, prefetch: int = 1, outer: float = 0.0
                    ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pipelined`'s seconds as (collectives the compute does not hide, compute slowed
    by the collectives beside it: ``slowdown * min(overlapped traffic, T)``)."""
    comm = gather + reduce
    if comm + outer <= 0:
        return np.zeros_like(compute), np.zeros_like(compute)
    x = compute / n
    if prefetch <= 0:
        total = n * gather + (n - 1) * np.maximum(max(reduce, outer), x) + x + reduce + outer
        slowed = slowdown * np.minimum(n * (reduce + outer), compute)
    else:
        total = gather + (n - 1) * np.maximum(max(comm, outer), x) + x + reduce + outer
        slowed = slowdown * np.minimum(n * (comm + outer), compute)
    runs = compute > 0
    return np.where(runs, total - compute, 0.0), np.where(runs, slowed, 0.0)


def copy_kernels(w: Workload, topo: Topology, shape: PlanShape, stage: int, chunk: int,
                 stack: Stack) -> tuple[float, float]:
    """Seconds of the stack's copy kernels around the FSDP collectives of one chunk's
    forward and backward (compute stream): copy-out of every gathered parameter, and in
    the backward the copy-in of every reduced gradient (and the re-gather's copy-out
    under reshard-after-forward). Zero for Megatron-FSDP and FSDP1 (flat buffers). The
    copy-out moves the gathered dtype: the profile's bytes per 16-bit parameter scale by
    :func:`gathered_bytes` over the 16-bit width (FP8 all-gather: half). Bytes -> s by
    :func:`simulator.compute.memory_time`."""
    gather, regather, reduce = copy_parts(w, topo, shape, stage, chunk, stack)
    return gather, regather + reduce


def copy_parts(w: Workload, topo: Topology, shape: PlanShape, stage: int, chunk: int,
               stack: Stack) -> tuple[float, float, float]:
    """:func:`copy_kernels` apart: (forward copy-out, backward re-gather copy-out,
    backward copy-in) seconds of one chunk and micro-batch."""
    tr = w.training
    if stack.fsdp_copy_bytes_per_param <= 0 and stack.fsdp_reduce_copy_bytes_per_param <= 0:
        return 0.0, 0.0, 0.0
    sp = shape.params[stage]
    per_chunk = shape.partition.layers[stage]
    share = per_chunk[chunk] / max(1, sum(per_chunk))
    params = (sp.dense + sp.expert) * share
    trained = sp.trainable.total * share  # gradients copied in (not LoRA's frozen base)
    # the profile's copy-out bytes are per 16-bit parameter (read + write); a float8
    # all-gather copies out the 1-byte FP8 data it gathered (torchao fsdp_utils.py
    # fsdp_pre_all_gather returns ``float8_tensor._data``), so half of them
    width = gathered_bytes(w, stack) / weight_bytes(tr)
    gather = stack.fsdp_copy_bytes_per_param * width * params if tr.params_sharded else 0.0
    regather = gather if stack.reshards(w.parallelism.pipeline) else 0.0
    reduce = stack.fsdp_reduce_copy_bytes_per_param * trained
    gpu = topo.gpu
    return memory_time(gather, gpu), memory_time(regather, gpu), memory_time(reduce, gpu)


def once_per_schedule(w: Workload, stack: Stack) -> bool:
    """Whether the plan's FSDP syncs once per pipeline schedule (the stack's
    ``sync_once_per_schedule`` under pipeline parallelism)."""
    return stack.sync_once_per_schedule and w.parallelism.pipeline > 1


# The FSDP seconds of a stage, apart (``Plan.fsdp_breakdown``, ``Result.fsdp_breakdown_s``):
# collectives the compute does not hide (first gather, last reduce-scatter, and any unit whose
# traffic outlasts its compute), the copy kernels on the compute stream, and the compute slowed
# by the collectives running beside it. They sum to the FSDP part of the exposed "dp" time.
FSDP_KEYS = ("exposed_collectives", "copy_kernels", "overlap_slowdown")


def _traffic(compute: np.ndarray, n: int, gather: float, reduce: float, copy: float,
             slowdown: float, depth: int, parts: dict[str, float], outer: float = 0.0
             ) -> np.ndarray:
    """Seconds added to phases of ``compute`` seconds (array, 0 where the phase does not run):
    ``copy`` seconds of copy kernels and the units' collectives pipelined with both
    (:func:`pipelined_parts`; ``outer`` on a link of its own); each part summed into
    ``parts`` (:data:`FSDP_KEYS`)."""
    runs = compute > 0
    exposed, slowed = pipelined_parts(compute + copy, n, gather, reduce, slowdown, depth,
                                      outer)
    exposed, slowed = np.where(runs, exposed, 0.0), np.where(runs, slowed, 0.0)
    copies = np.where(runs, copy, 0.0)
    for key, val in zip(FSDP_KEYS, (exposed, copies, slowed), strict=True):
        parts[key] = parts.get(key, 0.0) + float(val.sum())
    return exposed + slowed + copies


def _last_reductions(reduce: float, outer: float, apart: bool) -> tuple[float, float]:
    """(in-line reduction, reduction on a link of its own) seconds per unit of the backward
    that also reduces across HSDP instances: the outer one beside the next unit's reduce-
    scatter where it runs ``apart``, else in line behind it."""
    return (reduce, outer) if apart else (reduce + outer, 0.0)


def _microbatch_traffic(fwd: np.ndarray, bwd: np.ndarray, n: int, gather: float,
                        reduce: float, outer: float, copies: tuple[float, float], keep: bool,
                        slowdown: float, depth: int, parts: dict[str, float] | None = None,
                        apart: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Seconds FSDP adds to one chunk's forward and backward micro-batches when every
    micro-batch gathers (forward, and backward unless the weights were ``keep``-t) and
    reduce-scatters (backward), pipelined with the units' compute (:func:`pipelined`); under
    HSDP the chunk's last backward also reduces across the instances (``outer``): a stage of
    its own where it runs on a link ``apart`` from the reduce-scatter's, else in line behind
    it. Parts summed into ``parts``."""
    parts = {} if parts is None else parts
    fcopy, bcopy = copies
    bgather = 0.0 if keep else gather
    f = _traffic(fwd, n, gather, 0.0, fcopy, slowdown, depth, parts)
    runs = np.flatnonzero(bwd)
    if not (outer > 0 and runs.size):
        return f, _traffic(bwd, n, bgather, reduce, bcopy, slowdown, depth, parts)
    # HSDP: the chunk's last backward also reduces across the instances
    last = np.zeros_like(bwd)
    last[runs[-1]] = bwd[runs[-1]]
    rest = np.where(last > 0, 0.0, bwd)
    r, o = _last_reductions(reduce, outer, apart)
    b = _traffic(rest, n, bgather, reduce, bcopy, slowdown, depth, parts) \
        + _traffic(last, n, bgather, r, bcopy, slowdown, depth, parts, o)
    return f, b


def _schedule_traffic(fwd: np.ndarray, bwd: np.ndarray, n: int, gather: float, reduce: float,
                      outer: float, copies: tuple[float, float, float], keep: bool,
                      slowdown: float, depth: int, parts: dict[str, float] | None = None,
                      apart: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Seconds FSDP adds to one chunk's forward and backward micro-batches when it syncs
    once per pipeline schedule (PyTorch pipelining, ``torch/distributed/pipelining/stage.py``
    ``backward_maybe_with_nosync``: every backward runs with ``set_requires_gradient_sync``
    and ``set_reshard_after_backward`` off, and after the last one ``post_backward`` reduce-
    scatters each parameter group and ``_root_post_backward_final_callback`` makes the
    compute stream wait for them). Weights kept after the forward (``keep``) are gathered on
    the chunk's first forward only; otherwise every forward and backward gathers them. The
    reduce-scatters of all ``n`` units and their copy-in follow the last backward, in line;
    under HSDP each unit's outer reduction follows its reduce-scatter, beside the next unit's
    where it runs on a link ``apart`` (``r + o + (n-1) max(r, o)``), else in line
    (``n (r + o)``). Parts summed into ``parts``."""
    parts = {} if parts is None else parts
    gcopy, rcopy, icopy = copies
    f, b = np.zeros_like(fwd), np.zeros_like(bwd)
    frun, brun = np.flatnonzero(fwd), np.flatnonzero(bwd)
    if keep and frun.size:
        first = np.zeros_like(fwd)
        first[frun[0]] = fwd[frun[0]]
        f = _traffic(first, n, gather, 0.0, gcopy, slowdown, depth, parts)
    elif not keep:
        f = _traffic(fwd, n, gather, 0.0, gcopy, slowdown, depth, parts)
        b = _traffic(bwd, n, gather, 0.0, rcopy, slowdown, depth, parts)
    if brun.size:
        r, o = _last_reductions(reduce, outer, apart)
        tail = r + o + (n - 1) * max(r, o)
        b[brun[-1]] += tail + icopy
        parts["exposed_collectives"] = parts.get("exposed_collectives", 0.0) + tail
        parts["copy_kernels"] = parts.get("copy_kernels", 0.0) + icopy
    return f, b


def add_fsdp_traffic(w: Workload, topo: Topology, shape: PlanShape,
                     groups: dict[str, Placement], fwd: np.ndarray, bwd: np.ndarray,
                     totals: list[dict[str, float]] | None,
                     breakdown: list[dict[str, float]] | None = None
                     ) -> tuple[np.ndarray, np.ndarray] | None:
    """Add the per-micro-batch FSDP collectives to the ``[stage, chunk, micro-batch]``
    forward and backward tables in place, and their exposed seconds to each stage's
    ``totals["dp"]`` (when given) and, apart (:data:`FSDP_KEYS`), to each stage's
    ``breakdown`` dict (when given). Returns the seconds added (forward, backward tables;
    the trace shows them), or None without sharded gradients, which adds nothing."""
    tr = w.training
    if not tr.grads_sharded:
        return None
    added = (np.zeros_like(fwd), np.zeros_like(bwd))
    slowdown = topo.gpu.comm_overlap_slowdown
    stack = run_stack(tr)
    depth = stack.prefetch_depth
    once = once_per_schedule(w, stack)
    keep = not stack.reshards(w.parallelism.pipeline)
    apart = outer_apart(groups)  # one placement for every stage and chunk
    for s in range(fwd.shape[0]):
        for c in range(fwd.shape[1]):
            n = units(shape, s, c, stack.fsdp_units_per_layer)
            gather, reduce, outer = unit_collectives(w, topo, shape, groups, s, c)
            parts: dict[str, float] = {} if breakdown is None else breakdown[s]
            if once:
                f, b = _schedule_traffic(fwd[s, c], bwd[s, c], n, gather, reduce, outer,
                                         copy_parts(w, topo, shape, s, c, stack), keep,
                                         slowdown, depth, parts, apart)
            else:
                f, b = _microbatch_traffic(fwd[s, c], bwd[s, c], n, gather, reduce, outer,
                                           copy_kernels(w, topo, shape, s, c, stack), keep,
                                           slowdown, depth, parts, apart)
            fwd[s, c] += f
            bwd[s, c] += b
            added[0][s, c], added[1][s, c] = f, b
            if totals is not None:
                totals[s]["dp"] = totals[s].get("dp", 0.0) + float(f.sum() + b.sum())
    return added
