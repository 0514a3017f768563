"""SimPy replay of one training step: pipeline stages, p2p transfers, DP sync, optimizer.

One SimPy process per *distinct* simulated rank: a pipeline stage stands for
all its TP, CP and DP peers, which do the same work in lockstep (their
differences, such as causal CP imbalance or MoE skew, are folded into the
phase durations by the workload layer, which takes the slowest peer at each
synchronising collective). So the event count grows with stages and
micro-batches, never with the GPU count.

Streams per simulated rank and their dependencies:

* ``compute``: forward / backward phases in schedule order. A forward waits
  for the previous stage's activation, a backward for the next stage's
  gradient (the last stage's last chunk starts its backward from its own
  forward).
* ``pp``: point-to-point sends, one at a time per sending stage (a FIFO link
  with a "free at" time), overlapped with compute; the receiver's dependency
  fires when the send completes.
* ``dp``: gradient reduce-scatter / all-reduce buckets, served one at a time
  in release order. With ``overlap_grad_reduce`` each chunk's buckets are
  released evenly over the last micro-batch's backward of that chunk
  (Megatron's bucketed DDP); otherwise all at the end of the pipeline. Since
  gradient sync never blocks compute here, this stream is computed after the
  SimPy replay from the recorded release times (no events of its own). The
  backward it overlapped ran ``overlap_slowdown`` slower for the overlapped
  time (SMs and HBM taken by NCCL), which delays the stage's end.
* then the optimizer step, then the parameter all-gather (distributed
  optimizer), overlapped with the next step's warm-up forwards when
  ``overlap_param_gather``.

Ties are broken by SimPy's (time, priority, insertion id) order; processes are
created in stage order, so runs are deterministic.
"""

from .core import EngineInput, EngineResult, Record, run_engine

__all__ = ["EngineInput", "EngineResult", "Record", "run_engine"]
