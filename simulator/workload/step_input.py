"""The step around the pipeline: what the engine needs besides the phase tables.

Per pipeline stage:

* **p2p**: one activation send per micro-batch between neighbouring stages over
  the PP group, ``Tn x h`` elements (``Tn = T/tp`` with sequence parallelism, which
  sends the TP shard, else ``T``);
* **DP gradient buckets** of each model chunk, released over the chunk's last
  backward: Megatron-Core DDP buckets of ``max(40e6, 1e6 * DP)`` parameters (``DP``
  without CP), each reduce-scattered (distributed optimizer) or all-reduced, dense
  parameters over ``DP*CP`` and expert parameters over expert-DP, in fp32 unless
  ``grad_reduce_in_fp32`` is off. Only the first pipeline stage's first model chunk is
  bucketed: every other chunk reduces each of its buffers (dense, expert) as one
  bucket once its last backward ends (:func:`bucketed`); with two model copies
  (DualPipe) a chunk's gradient is first summed with its twin's on stage ``p-1-s``;
* **optimizer step** on the stage's shard of parameters
  (:func:`simulator.compute.optimizer_time`);
* **parameter all-gather** of the distributed optimizer, in the dtype the model holds
  its weights (:func:`simulator.memory.states.weight_bytes`).

With ``num_distributed_optimizer_instances`` = k (Megatron-Core's partial distributed
optimizer) a bucket is reduce-scattered inside its instance (``DP*CP/k`` consecutive
ranks) and its shard, ``1/(DP*CP/k)`` of it, then all-reduced across the k instances,
back to back on one communication stream (``param_and_grad_buffer.py``
``start_grad_sync``: "RS" then "AR", Megatron-LM d98e8a64); the weights are gathered
inside the instance only. NVIDIA's performance guide gives the reason to do it: two small
rings instead of one flat ring whose latency grows with every rank (Megatron-Bridge
``docs/performance-guide.md``, "Slow DP communication at large scaling training").

Megatron-FSDP: ``optim`` is the distributed optimizer's step; with sharded gradients
(``optim_grads``, ``optim_grads_params``) there are no end-of-step buckets (every
backward reduce-scatters its own gradients, :mod:`.fsdp`), and with sharded weights no
parameter all-gather after the optimizer (every forward and backward gathers them).

Seconds and bytes, via :func:`simulator.collectives.collective_time`.
"""

from __future__ import annotations

import math

import numpy as np

from ..collectives import collective_time
from ..compute import BYTES, optimizer_time
from ..config.stacks import run_stack
from ..config.workload import Workload
from ..engine import EngineInput
from ..hardware import Placement, Topology
from ..memory.states import optimizer_states, weight_bytes
from ..shape.params import StageParams
from ..shape.plan_shape import PlanShape
from .blocking_p2p import engine_p2p, p2p_seconds
from .layout import strides
from .ops import dims

GRAD_BYTES = 4  # fp32 gradient reduction (Megatron's default for bf16 training)


def grad_comm_bytes(w: Workload) -> float:
    """Bytes per gradient element on the wire: fp32 unless ``grad_reduce_in_fp32`` is off."""
    return GRAD_BYTES if w.training.grad_reduce_in_fp32 else BYTES["bf16"]


def bucketed(stage: int, chunk: int) -> bool:
    """Whether (stage, chunk) splits its gradients into DDP buckets.

    Megatron-LM wraps every model chunk but the first with ``disable_bucketing=True``
    (``megatron/training/models/dist_utils.py``: ``disable_bucketing = model_chunk_idx > 0
    or overlap_param_gather_with_optimizer_step``), and Megatron-Core DDP turns bucketing
    off on every pipeline rank but the first (``distributed_data_parallel.py``: ``if
    disable_bucketing or pp_rank > 0: self.bucket_size = None``; Megatron-LM d98e8a64):
    their gradient sync is not on the critical path. An unbucketed chunk reduces each
    gradient buffer as one bucket once the chunk's last backward has ended. NeMo 1.0 with
    Apex's DistributedFusedAdam (the dgxc-benchmarking 24.x recipes) syncs every chunk,
    the first stage's first one included, through Megatron-Core's ``grad_sync_func`` after
    the chunk's last backward, ``pp_rank`` backward steps late on pipeline rank
    ``pp_rank`` (``schedules.py`` ``backward_step_helper_postprocess``); that delay and
    the first chunk's lost overlap are not modelled.
    """
    return stage == 0 and chunk == 0


def buckets_of(params: float, dp: int, group: Placement, topo: Topology, dist_opt: bool,
               grad_bytes: float = GRAD_BYTES, split: bool = True,
               inter: Placement | None = None, bucket_size: float | None = None
               ) -> list[tuple[float, float]]:
    """(seconds, bytes) of each DDP bucket of a chunk holding ``params`` elements.

    Megatron-Core DDP buckets hold ``bucket_size`` parameters (``--ddp-bucket-size``), by
    default ``max(40e6, 1e6 * dp)``, ``dp`` the data-parallel size without CP
    (``distributed_data_parallel.py``: ``max(40000000, 1000000 * dp_group.size())``);
    without ``split`` the chunk is one bucket
    (:func:`bucketed`). Each is reduce-scattered (distributed optimizer) or all-reduced
    over ``group``, in fp32 unless ``grad_reduce_in_fp32`` is off (then bf16,
    ``grad_bytes`` = 2). With several optimizer instances ``group`` is one instance and
    the reduce-scatter's shard (``S / group.size`` bytes) is then all-reduced over
    ``inter``, the same bucket's time: ``RS(S, group) + AR(S / n, inter)`` seconds.
    """
    ranks = group.size * (inter.size if inter is not None else 1)
    if ranks <= 1 or params <= 0:
        return []
    size = (bucket_size or max(40e6, 1e6 * dp)) if split else params
    n = max(1, math.ceil(params / size))
    op = "reduce_scatter" if dist_opt else "all_reduce"
    nbytes = params / n * grad_bytes
    seconds = collective_time(op, nbytes, group, topo)
    if inter is not None and inter.size > 1:
        seconds += collective_time("all_reduce", nbytes / group.size, inter, topo)
    return [(seconds, nbytes)] * n


def lockstep_slots(w: Workload, sched, p: int, m: int, v: int) -> list[list[int]] | None:
    """The schedule's PyTorch time slots where the run's stack waits for each slot's
    transfers before the next (``pipeline.lockstep``, :mod:`simulator.engine.lockstep`);
    None otherwise, and for a schedule PyTorch does not lay out in slots: its single-stage
    ``Schedule1F1B`` waits before each phase for that phase's receive batched with the
    previous phase's send, which is not modelled (the asynchronous replay)."""
    if p <= 1 or not run_stack(w.training).pipeline_lockstep:
        return None
    return sched.time_steps(p, m, v)


def engine_input(w: Workload, topo: Topology, shape: PlanShape, groups: dict[str, Placement],
                 schedule, tables, params: list[StageParams], with_buckets: bool = True
                 ) -> EngineInput:
    """The engine's input: the phase ``tables`` (fwd, bwd, W, forward / backward exposed
    EP, ``[stage, chunk, micro-batch]`` seconds) with the ``schedule``'s steps, and per
    stage the p2p send, the DP gradient buckets of each chunk (none without
    ``with_buckets``), the optimizer step and the parameter all-gather."""
    p, tr = w.parallelism, w.training
    fwd, bwd, wgrad, fwd_ep, bwd_ep = tables
    sched = shape.schedule
    g = groups
    x = dims(w)
    P, V = p.pipeline, shape.chunks
    act = x.Tn * x.h * x.e  # SP sends the sequence-parallel shard between stages
    # its send time; DeepSpeed-style blocking sends sit in the phases instead (blocking_p2p)
    p2p = engine_p2p(w, p2p_seconds(w, topo, g))
    dense_shard, edp = shape.dense_shard, shape.expert_shard
    buckets, sizes, opt, ag, ag_bytes = [], [], [], [], []
    grad_bytes = grad_comm_bytes(w)
    # The distributed optimizer all-gathers the weights in the dtype the model holds them:
    # FP8 with fp8_param_gather (Megatron-Core: the TE weights are Float8Tensors and the
    # gather moves their 1-byte data), bf16 otherwise.
    wbytes = weight_bytes(tr)
    # Two model copies (DualPipe): each chunk's gradient is first summed with its twin's on
    # stage p-1-s, an all-reduce of two ranks placed as the farthest pipeline pair.
    twin = topo.place(2, strides(w)["pp"] * (P - 1)) \
        if sched.param_copies(P, p.vp) > 1 and P > 1 else None
    for s in range(P):
        sp = params[s].trainable  # what gets gradients and an optimizer step (not LoRA's base)
        per_chunk = shape.partition.layers[s]
        total_layers = max(1, sum(per_chunk))
        row: list[list[tuple[float, float]]] = [] if with_buckets else [[] for _ in range(V)]
        for c in range(V if with_buckets else 0):
            share = per_chunk[c] / total_layers
            pair = (sp.dense + sp.expert) * share * grad_bytes
            twin_sum = [(collective_time("all_reduce", pair, twin, topo), pair)] if twin else []
            if tr.grads_sharded:  # reduce-scattered after every backward (workload/fsdp.py)
                row.append(twin_sum)
                continue
            split = bucketed(s, c)
            row.append(twin_sum
                       + buckets_of(sp.dense * share, p.data, g["dp_cp_intra"], topo,
                                    tr.optimizer_sharded, grad_bytes, split, g["dp_cp_inter"],
                                    tr.ddp_bucket_size)
                       + buckets_of(sp.expert * share, p.data, g["edp_intra"], topo,
                                    tr.optimizer_sharded, grad_bytes, split, g["edp_inter"],
                                    tr.ddp_bucket_size))
        buckets.append([[t for t, _ in chunk] for chunk in row])
        sizes.append([[b for _, b in chunk] for chunk in row])
        opt.append(optimizer_time(sp.dense / dense_shard + sp.expert / edp, topo.gpu,
                                  len(optimizer_states(tr))))
        gather, gathered = 0.0, (sp.dense + sp.expert) * wbytes
        # ZeRO-3 keeps the weights sharded: the next forward gathers them (workload/fsdp.py)
        if tr.optimizer_sharded and not tr.params_sharded:
            gather = collective_time("all_gather", sp.dense * wbytes, g["dp_cp_intra"], topo) \
                + collective_time("all_gather", sp.expert * wbytes, g["edp_intra"], topo)
        elif tr.outer_dp_sharding_strategy == "optim":
            # HFSDP: the optimizer updated 1/k of the instance's weight shard; the instances
            # gather their shards once per step (Megatron-FSDP outer_fsdp_group_param_gather)
            gathered = (sp.dense / g["dp_cp_intra"].size + sp.expert / g["edp_intra"].size) \
                * wbytes
            gather = collective_time("all_gather", sp.dense * wbytes / g["dp_cp_intra"].size,
                                     g["dp_cp_inter"], topo) \
                + collective_time("all_gather", sp.expert * wbytes / g["edp_intra"].size,
                                  g["edp_inter"], topo)
        ag.append(gather)
        ag_bytes.append(gathered if gather else 0.0)
    return EngineInput(
        schedule=schedule, route=shape.route, post_validation=sched.post_validation,
        lockstep=lockstep_slots(w, sched, P, w.num_microbatches, p.vp),
        wgrad=wgrad if sched.uses_w else None, fwd_ep=fwd_ep, bwd_ep=bwd_ep,
        fwd=fwd, bwd=bwd, p2p=np.full(P, p2p), dp_buckets=buckets,
        optimizer=np.array(opt), param_gather=np.array(ag),
        overlap_grad_reduce=tr.overlap_grad_reduce,
        overlap_param_gather=tr.overlap_param_gather,
        overlap_slowdown=topo.gpu.comm_overlap_slowdown, p2p_bytes=act if P > 1 else 0.0,
        dp_bucket_bytes=sizes, param_gather_bytes=np.array(ag_bytes))
