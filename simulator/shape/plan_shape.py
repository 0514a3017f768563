"""The plan's shape: everything about a plan that follows from its sizes alone, computed once.

Given a workload (model, batch, parallel plan) and nothing about hardware,
:func:`plan_shape` derives, in one place:

* the schedule (:mod:`simulator.schedules`) and its send rule (:class:`Route`);
* the layer split: decoder-layer ids per (stage, chunk)
  (:class:`~.partition.Partition`, placed as the schedule says);
* parameters per GPU of each stage (:class:`~.params.StageParams`);
* the local sequence per CP rank, ``seq_length / context``;
* the expert-data-parallel size ``DP*CP*TP / (EP*ETP)`` and the optimizer
  shards: dense parameters are sharded over ``DP*CP``, expert parameters over
  expert-DP, when the distributed optimizer is on (else 1); with ``k`` optimizer
  instances over ``1/k`` of those (Megatron-FSDP's HFSDP, ``outer_dp_sharding_strategy:
  optim``, shards the optimizer state over all of them again).

Micro-batches in flight per stage are the schedule's own answer
(:meth:`simulator.schedules.Schedule.in_flight`), which the memory model asks
directly; they are not copied here, so a plan built for timing alone pays nothing for them.

The memory model, the validation, the plan builder, the search and the
reports read these instead of recomputing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..config.workload import Workload
from ..schedules import Route, Schedule, Step, schedule_of
from .params import StageParams, expert_data_parallel, stage_params
from .partition import Partition, partition_layers


@dataclass(frozen=True)
class PlanShape:
    """What follows from a plan's sizes alone (see the module docstring)."""

    schedule: Schedule
    route: Route
    partition: Partition
    params: tuple[StageParams, ...]  # per stage, one GPU
    local_seq: float  # tokens of the sequence on one CP rank
    expert_dp: int
    dense_shard: int  # optimizer shard of dense parameters
    expert_shard: int  # optimizer shard of expert parameters
    microbatches: int
    chunks: int  # chunks per stage
    # (dense, expert) ways the gradients and the weights split (inside one optimizer
    # instance; (1, 1) when not sharded)
    grad_shards: tuple[int, int] = (1, 1)
    param_shards: tuple[int, int] = (1, 1)

    @property
    def optimizer_shards(self) -> tuple[int, int]:
        """(dense, expert) ways the optimizer state splits."""
        return self.dense_shard, self.expert_shard

    @property
    def stages(self) -> int:
        return self.partition.num_stages

    def layer_ids(self, stage: int, chunk: int) -> list[int]:
        return self.partition.layer_ids(stage, chunk)

    def first(self, stage: int, chunk: int) -> bool:
        """Whether (stage, chunk) holds the embedding."""
        return self.route.first(stage, chunk)

    def last(self, stage: int, chunk: int) -> bool:
        """Whether (stage, chunk) holds the output layer and the loss."""
        return self.route.last(stage, chunk)

    def mtp(self, stage: int, chunk: int) -> bool:
        """Whether (stage, chunk) runs the multi-token-prediction layers: the loss's chunk,
        or the standalone MTP stage a layout names (``Partition.mtp_chunk``)."""
        g = self.partition.mtp_chunk
        if g is None:
            return self.last(stage, chunk)
        return self.route.place[(stage, chunk)][1] == g


def plan_shape(w: Workload, partition: Partition | None = None) -> PlanShape:
    """The shape of ``w``'s plan (``partition``: its layer split, if already made); raises
    ConfigError if the layer split is impossible."""
    par, tr = w.parallelism, w.training
    sched = schedule_of(par)
    p, v, m = par.pipeline, par.vp, w.num_microbatches
    part = partition or partition_layers(w)
    edp = expert_data_parallel(w) if w.model.moe is not None else 1
    n = tr.num_distributed_optimizer_instances
    k = 1 if tr.outer_dp_sharding_strategy == "optim" else n
    inner = (par.data * par.context // n, max(1, edp // n))  # inside one instance
    return PlanShape(
        schedule=sched, route=schedule_route(sched, p, v), partition=part,
        params=tuple(stage_params(w, part, s) for s in range(p)),
        local_seq=local_seq(w), expert_dp=edp,
        dense_shard=par.data * par.context // k if tr.optimizer_sharded else 1,
        expert_shard=max(1, edp // k) if tr.optimizer_sharded else 1,
        microbatches=m, chunks=sched.chunks(v),
        grad_shards=inner if tr.grads_sharded else (1, 1),
        param_shards=inner if tr.params_sharded else (1, 1))


def local_seq(w: Workload) -> float:
    """Tokens of one sequence on one CP rank, ``seq_length / context``."""
    return w.model.seq_length / w.parallelism.context


def attended_keys(w: Workload) -> float:
    """Keys of the causal span a query row belongs to before masking (tokens): the sequence,
    or with packed documents their length-weighted mean ``sum(L_i^2) / sum(L_i)``
    (``training.packed_document_length``, at most the sequence)."""
    s = float(w.model.seq_length)
    doc = w.training.packed_document_length
    return min(float(doc), s) if doc is not None else s


def microbatch_tokens(w: Workload) -> float:
    """Tokens of one micro-batch on one CP rank, ``micro_batch_size * seq_length / context``
    (each TP rank of it sees them all)."""
    return w.training.micro_batch_size * w.model.seq_length / w.parallelism.context


def routed_tokens(w: Workload, T: float | None = None) -> int:
    """Tokens each EP rank routes per micro-batch and MoE layer, ``T * etp / tp`` of the
    ``T`` (default :func:`microbatch_tokens`) through its GEMMs: with ETP < TP the TP
    ranks split them (Megatron-Core parallel folding)."""
    p = w.parallelism
    return max(1, round((microbatch_tokens(w) if T is None else T) * p.etp / p.tensor))


@lru_cache(maxsize=512)
def schedule_steps(sched: Schedule, p: int, m: int, v: int) -> tuple[tuple[Step, ...], ...]:
    """``sched.steps(p, m, v)``, built once per size and frozen (tuples: plans share it).

    Sweeps and the search build thousands of plans with a handful of
    (schedule, p, m, v); the step lists are the same each time."""
    return tuple(tuple(st) for st in sched.steps(p, m, v))


@lru_cache(maxsize=512)
def microbatch_runs(sched: Schedule, p: int, m: int, v: int
                    ) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per stage and chunk, the micro-batches it forwards, sorted (DualPipe: half per
    direction)."""
    n = sched.chunks(v)
    out = []
    for steps in schedule_steps(sched, p, m, v):
        runs: list[list[int]] = [[] for _ in range(n)]
        for x in steps:
            if x.phase == "F":
                runs[x.chunk].append(x.mb)
        out.append(tuple(tuple(sorted(r)) for r in runs))
    return tuple(out)


@lru_cache(maxsize=512)
def schedule_route(sched: Schedule, p: int, v: int) -> Route:
    """``sched.route(p, v)``, one object per size (read-only; the engine caches what it
    derives from a step list and its route by identity)."""
    return sched.route(p, v)
