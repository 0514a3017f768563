"""SimPy replay of one training step: pipeline stages, p2p transfers, DP sync, optimizer.

One SimPy process per *distinct* simulated rank: a pipeline stage stands for
all its TP, CP and DP peers, which do the same work in lockstep (their
differences, such as causal CP imbalance or MoE skew, are folded into the
phase durations by the workload layer, which takes the slowest peer at each
synchronising collective). So the event count grows with stages and
micro-batches, never with the GPU count.

Streams per simulated rank and their dependencies:

* ``compute``: forward / backward / weight-gradient steps in schedule order.
  A forward waits for the activation of the stage holding the previous global
  chunk, a backward for the gradient of the next one (the chunk with the loss
  starts its backward from its own forward); where it comes from is the
  schedule's :class:`~simulator.schedules.Route`, the one send rule. A ``W``
  step runs the weight-gradient part of a backward split into ``B`` and ``W``
  (zero-bubble schedules); an F&B pair (DualPipe) runs as one slot in which
  each phase's exposed EP all-to-all hides under the other's compute.
* ``pp``: point-to-point sends, one at a time per sending stage (a FIFO link
  with a "free at" time), overlapped with compute; the receiver's dependency
  fires when the send completes.
* ``dp``: gradient reduce-scatter / all-reduce buckets, served one at a time
  in release order. With ``overlap_grad_reduce`` each chunk's buckets are
  released evenly over the step that completes that chunk's weight gradients
  (its last backward, or its last ``W``)
  (Megatron's bucketed DDP); otherwise all at the end of the pipeline. Since
  gradient sync never blocks compute here, this stream is computed after the
  SimPy replay from the recorded release times (no events of its own). The
  backward it overlapped ran ``overlap_slowdown`` slower for the overlapped
  time (SMs and HBM taken by NCCL), which delays the stage's end.
* then the optimizer step, then the parameter all-gather (distributed
  optimizer), overlapped with the next step's warm-up forwards when
  ``overlap_param_gather``.

Records go to a recorder (:mod:`.records`): kept for the trace and the
timeline, only counted on the plain ``run`` path. On that path a direct
list-scheduling replay (:mod:`.replay`) stands in for SimPy with the same
numbers, and folds long pipelines (:mod:`.periodic`, :mod:`.windows`): the
steady state replayed once, every other window extrapolated exactly.

Ties are broken by SimPy's (time, priority, insertion id) order; processes are
created in stage order, so runs are deterministic.
"""

from .core import EngineInput, EngineResult, ScheduleDeadlock, run_engine
from .records import ListRecorder, NullRecorder, Record, Recorder
from .tail import StageStats

__all__ = ["EngineInput", "EngineResult", "ListRecorder", "NullRecorder", "Record", "Recorder",
           "ScheduleDeadlock", "StageStats", "run_engine"]
