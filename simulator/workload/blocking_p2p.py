"""Pipeline sends that block the sender (stacks/*.yaml ``pipeline.blocking_p2p``).

Megatron-Core posts its pipeline sends asynchronously: a stage's next phase starts when
its compute ends and the activation (or gradient) travels beside it, so the engine
(:mod:`simulator.engine`) starts each send at the phase's end and delivers it ``p2p``
seconds later. DeepSpeed's pipeline engine does not: ``deepspeed/runtime/pipe/p2p.py``
``send`` / ``recv`` assert ``async_op == False`` (a blocking ``dist.send`` or a broadcast
in a two-rank group) and ``PipelineEngine._exec_schedule`` runs the ``SendActivation`` /
``SendGrad`` instructions in line with the forward and backward passes. The sender's next
instruction waits for the transfer, so the sending phase lasts its send longer, and the
data is at the receiver when that phase ends.

Modelled in the phase tables: every forward of a chunk that is not the model's last adds
the send of its output activation, every backward of a chunk that is not the first adds
the send of its input gradient (both ``p2p`` seconds: :func:`simulator.collectives.
collective_time` ``send_recv`` of ``micro-batch tokens x hidden x element bytes`` over the
pipeline pair, the sequence-parallel shard under SP, as the engine prices its sends); the
engine's own sends are then zero (:func:`engine_p2p`). What is not modelled: a send also
waits for its receiver to post the matching receive (NCCL rendezvous). Seconds.
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


def p2p_seconds(w: Workload, topo: Topology, groups: dict[str, Placement]) -> float:
    """Seconds of one pipeline send of a micro-batch's activation (or its gradient)."""
    if w.parallelism.pipeline <= 1:
        return 0.0
    x = dims(w)
    return collective_time("send_recv", x.Tn * x.h * x.e, groups["pp"], topo)


def add_blocking_sends(w: Workload, topo: Topology, shape: PlanShape,
                       groups: dict[str, Placement], fwd: np.ndarray, bwd: np.ndarray,
                       totals: list[dict[str, float]] | None) -> None:
    """Add each blocking send to its phase in the ``[stage, chunk, micro-batch]`` tables
    (in place) and its seconds to the stage's ``totals["pp"]``; nothing unless the stack
    blocks (module docstring)."""
    if not blocking(w):
        return
    t = p2p_seconds(w, topo, groups)
    for s in range(fwd.shape[0]):
        for c in range(fwd.shape[1]):
            f = np.where(fwd[s, c] > 0, 0.0 if shape.last(s, c) else t, 0.0)
            b = np.where(bwd[s, c] > 0, 0.0 if shape.first(s, c) else t, 0.0)
            fwd[s, c] += f
            bwd[s, c] += b
            if totals is not None:
                totals[s]["pp"] = totals[s].get("pp", 0.0) + float(f.sum() + b.sum())


def engine_p2p(w: Workload, p2p: float) -> float:
    """The engine's own send time: zero where the phases already hold the blocking send."""
    return 0.0 if blocking(w) else p2p
