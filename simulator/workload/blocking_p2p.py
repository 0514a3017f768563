"""Pipeline transfers that hold the compute stream (stacks/*.yaml ``pipeline.blocking_p2p``).

Megatron-Core posts its pipeline sends asynchronously: a stage's next phase starts when
its compute ends and the activation (or gradient) travels beside it, so the engine
(:mod:`simulator.engine`) starts each send at the phase's end and delivers it ``p2p``
seconds later. DeepSpeed's pipeline engine does not: ``deepspeed/runtime/pipe/p2p.py``
``send`` / ``recv`` assert ``async_op == False`` (a blocking ``dist.send`` or a broadcast
in a two-rank group), and ``PipelineEngine._exec_schedule`` runs each step's instructions
in line on the compute stream. Its ``TrainSchedule`` (``deepspeed/runtime/pipe/schedule.py``)
pairs every step with one neighbour: a forward step runs ``SendGrad`` (the previous
micro-batch's input gradient) and ``RecvActivation`` (this micro-batch's input) with the
previous stage, a backward step ``RecvGrad`` and ``SendActivation`` (the previous forward's
output, deferred to this step) with the next stage, and then its compute. Both transfers
are rendezvous: each waits for the neighbour to reach the matching instruction, and the
compute waits for both.

DeepSpeed partitions the pipeline buffers over the model-parallel (TP) group
(``PipelineEngine``: ``is_pipe_partitioned`` / ``is_grad_partitioned`` = model parallel;
``deepspeed/runtime/utils.py`` ``PartitionedTensor``): each TP rank sends its ``1/t`` slice of
the activation (or gradient) over its own link, and the receiver all-gathers the whole tensor
over the TP group before its pass (``PartitionedTensor.from_meta(...).full()`` in
``_exec_forward_pass`` / ``_exec_backward_pass``).

Modelled in the phase tables: every forward of a chunk that is not the model's first adds
its two transfers and the all-gather of its input, and every backward of a chunk that is not
the model's last the same (:func:`rendezvous_seconds`: ``2 * send(S/t) + all_gather(S)`` with
``S`` = micro-batch tokens x hidden x element bytes, the sequence-parallel shard under SP,
:func:`simulator.collectives.collective_time` ``send_recv`` over the pipeline pair and
``all_gather`` over the TP group; ``2 * send(S)`` without TP); the engine's own sends are then
zero (:func:`engine_p2p`). Checked against a replay of ``TrainSchedule`` itself with rendezvous
transfers (``tests/test_deepspeed_schedule.py``, 4 and 8 stages of a TP 8 plan, transfers of
11 % of a forward): the step agrees within 1 % and the transfers' share of it within 9-13 %;
one transfer per phase (the sender alone held) gives about half of that share. Seconds.
"""

from __future__ import annotations

import numpy as np

from ..collectives import collective_time
from ..config.stacks import run_stack
from ..config.workload import Workload
from ..hardware import Placement, Topology
from ..shape.plan_shape import PlanShape
from .ops import dims


def blocking(w: Workload) -> bool:
    """Whether the run's stack blocks the sender on each pipeline send."""
    return w.parallelism.pipeline > 1 and run_stack(w.training).blocking_p2p


def _activation_bytes(w: Workload) -> float:
    """Bytes of one micro-batch's activation on a pipeline boundary (the SP shard under SP)."""
    x = dims(w)
    return x.Tn * x.h * x.e


def p2p_seconds(w: Workload, topo: Topology, groups: dict[str, Placement]) -> float:
    """Seconds of one pipeline send of a micro-batch's activation (or its gradient)."""
    if w.parallelism.pipeline <= 1:
        return 0.0
    return collective_time("send_recv", _activation_bytes(w), groups["pp"], topo)


def rendezvous_seconds(w: Workload, topo: Topology, groups: dict[str, Placement]) -> float:
    """Seconds one DeepSpeed pipeline step adds to its pass: its two rendezvous transfers of
    the TP rank's ``1/t`` slice and the all-gather of the received tensor over the TP group
    (module docstring); zero without pipeline parallelism."""
    if w.parallelism.pipeline <= 1:
        return 0.0
    nbytes, t = _activation_bytes(w), w.parallelism.tensor
    if t <= 1:
        return 2.0 * collective_time("send_recv", nbytes, groups["pp"], topo)
    return (2.0 * collective_time("send_recv", nbytes / t, groups["pp"], topo)
            + collective_time("all_gather", nbytes, groups["tp"], topo))


def add_blocking_sends(w: Workload, topo: Topology, shape: PlanShape,
                       groups: dict[str, Placement], fwd: np.ndarray, bwd: np.ndarray,
                       totals: list[dict[str, float]] | None) -> None:
    """Add each step's rendezvous transfers and all-gather to its phase in the ``[stage, chunk,
    micro-batch]`` tables (in place) and their seconds to the stage's ``totals["pp"]``;
    nothing unless the stack blocks (module docstring)."""
    if not blocking(w):
        return
    t = rendezvous_seconds(w, topo, groups)
    for s in range(fwd.shape[0]):
        for c in range(fwd.shape[1]):
            f = np.where(fwd[s, c] > 0, 0.0 if shape.first(s, c) else t, 0.0)
            b = np.where(bwd[s, c] > 0, 0.0 if shape.last(s, c) else t, 0.0)
            fwd[s, c] += f
            bwd[s, c] += b
            if totals is not None:
                totals[s]["pp"] = totals[s].get("pp", 0.0) + float(f.sum() + b.sum())


def engine_p2p(w: Workload, p2p: float) -> float:
    """The engine's own send time: zero where the phases already hold the blocking send."""
    return 0.0 if blocking(w) else p2p
