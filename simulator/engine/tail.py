"""After the replay: each stage's DP stream, optimizer step and parameter all-gather.

Gradient sync never blocks compute in this model, so the DP stream is served
after the replay, in release order, without events of its own. The buckets
that ran beside the pipeline slowed it (SMs and HBM taken by NCCL,
``overlap_slowdown``), which delays the stage's end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .records import NullRecorder, Record, Recorder


@dataclass
class StageStats:
    busy: float = 0.0  # compute-stream time in phases
    pp_wait: float = 0.0  # idle time attributable to p2p transfers
    pipeline_end: float = 0.0  # end of the last backward
    grads_synced: float = 0.0  # end of the last DP bucket
    end: float = 0.0  # end of optimizer + exposed param gather
    warmup_fwd: float = 0.0  # forward time before the first backward
    optimizer: float = 0.0
    param_gather_exposed: float = 0.0
    first_start: float = -1.0  # start of the stage's first phase
    fb_saved: float = 0.0  # EP comm hidden by F&B overlap, net of its slowdown (s)


def dp_tail(inp: Any, s: int, st_: StageStats, jobs: list[tuple[float, float, int, float]],
            rec: Recorder) -> None:
    """DP stream (FIFO by release time), optimizer, exposed parameter all-gather of stage s.

    ``jobs``: (ready time, seconds, chunk, bytes) of each gradient bucket.
    """
    now = overlapped = 0.0
    keep = not isinstance(rec, NullRecorder)  # counting only: no Record per bucket
    for ready, t, c, size in sorted(jobs, key=lambda j: j[0]):
        start = max(now, ready)
        now = start + t
        overlapped += max(0.0, min(now, st_.pipeline_end) - start)
        if keep:
            rec.add(Record(s, "dp", "grad_sync", start, now, -1, c, size))
    if not keep:
        rec.count += len(jobs)
    st_.grads_synced = max(now, st_.pipeline_end + inp.overlap_slowdown * overlapped)
    st_.optimizer = float(inp.optimizer[s])
    start = st_.grads_synced
    rec.add(Record(s, "optimizer", "optimizer", start, start + st_.optimizer, -1, -1))
    start += st_.optimizer
    ag = float(inp.param_gather[s])
    if inp.overlap_param_gather:
        first = ag / max(1, len(jobs))
        exposed = max(first, ag - st_.warmup_fwd) if ag > 0 else 0.0
    else:
        exposed = ag
    if ag > 0:
        size = float(inp.param_gather_bytes[s]) if inp.param_gather_bytes is not None else 0.0
        rec.add(Record(s, "dp", "param_gather", start, start + ag, -1, -1, size))
    st_.param_gather_exposed = exposed
    st_.end = start + exposed
