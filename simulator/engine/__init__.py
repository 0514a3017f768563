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
* ``pp``: point-to-point sends, one at a time per sending stage, overlapped
  with compute; the receiver's dependency fires when the send completes.
* ``dp``: gradient reduce-scatter / all-reduce buckets. With
  ``overlap_grad_reduce`` each chunk's buckets are released during the last
  micro-batch's backward of that chunk (Megatron's bucketed DDP), in layer
  order back to front; otherwise all at the end.
* then the optimizer step, then the parameter all-gather (distributed
  optimizer), overlapped with the next step's warm-up forwards when
  ``overlap_param_gather``.

Ties are broken by SimPy's (time, priority, insertion id) order; processes are
created in stage order, so runs are deterministic.
"""

from .core import EngineInput, EngineResult, Record, run_engine

__all__ = ["EngineInput", "EngineResult", "Record", "run_engine"]
