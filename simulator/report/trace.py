"""Chrome / Perfetto trace of one simulated training step.

The trace-event JSON format (Google's "Trace Event Format" document; opened by
chrome://tracing and https://ui.perfetto.dev) is a list of events. We emit:

* one *process* per simulated rank, i.e. per pipeline stage (a stage stands
  for all its TP / CP / DP peers, which run in lockstep), named with
  ``process_name`` metadata (``"ph": "M"``);
* one *thread* per stream of that rank, named with ``thread_name``: compute,
  TP comm, CP ring, EP all-to-all, PP send/recv, DP comm, optimizer;
* complete events (``"ph": "X"``, ``ts`` and ``dur`` in microseconds) for every
  interval, with the op's FLOPs and bytes in ``args``;
* flow arrows (``"ph": "s"`` / ``"f"``) from each pipeline send to the phase on
  the neighbour stage that consumed it, so a wait can be traced to its cause.

Each forward / backward phase on the compute thread is a parent slice
(``F mb 3``) with the phase's kernels nested inside it: the
:class:`~simulator.workload.cost.TimedOp` list of
``plan.phases[(phase, stage, chunk)]`` placed at the phase's start. The plan
costs micro-batch 0 only; when another micro-batch's phase lasts longer or
shorter (MoE routing draws differ per micro-batch), its ops are stretched to
the phase's duration. TP, CP and EP collectives go to their own threads. A
collective that overlaps the previous one on the same thread (with TP
overlap, a reduce-scatter starts with its producer GEMM, before the preceding
all-gather has finished) is clipped to start when the previous one ends, and
the clip is recorded in ``args.clipped_us``: a thread never holds two
partially overlapping slices, which the trace viewers cannot draw.

Times are rounded to the nanosecond (3 decimals of a microsecond).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..io import atomic_write_text

THREADS = {  # stream -> (tid, thread name)
    "compute": (1, "compute"),
    "tp": (2, "TP comm"),
    "cp": (3, "CP ring"),
    "ep": (4, "EP all-to-all"),
    "pp": (5, "PP send/recv"),
    "dp": (6, "DP comm"),
    "optimizer": (7, "optimizer"),
}
DETAILS = ("op", "phase")


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


class _Writer:
    """Collects events; keeps each (pid, tid) lane free of partial overlaps."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lane_end: dict[tuple[int, int], float] = defaultdict(float)
        self.used: set[tuple[int, int]] = set()

    def slice(self, name: str, cat: str, pid: int, stream: str, start: float, end: float,
              args: dict[str, Any], lo: float | None = None, hi: float | None = None
              ) -> tuple[float, float]:
        """Add an X event from ``start`` to ``end`` (us), clipped to the lane and [lo, hi]."""
        tid = THREADS[stream][0]
        key = (pid, tid)
        ts = max(start, self.lane_end[key] if lo is None else lo)
        te = end if hi is None else min(end, hi)
        te = max(te, ts)
        if ts > start:
            args = {**args, "clipped_us": round(ts - start, 3)}
        self.events.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
                            "ts": ts, "dur": round(te - ts, 3), "args": args})
        if lo is None:  # top-level slice: the lane is busy until its end
            self.lane_end[key] = max(self.lane_end[key], te)
        self.used.add(key)
        return ts, te


def chrome_trace(plan: Any, engine: Any, result: Any = None, detail: str = "op"
                 ) -> dict[str, Any]:
    """Trace-event JSON (a dict) of ``engine.records``; ``detail="phase"`` omits the ops."""
    if detail not in DETAILS:
        raise ValueError(f"detail must be one of {DETAILS}, got {detail!r}")
    recs = sorted(engine.records, key=lambda r: (r.stage, r.start, r.end))
    out = _Writer()
    starts = {(r.stage, r.name, r.mb, r.chunk): r.start for r in recs if r.stream == "compute"}
    for r in recs:
        pid = r.stage + 1
        if r.stream == "compute":
            _phase(out, plan, r, pid, detail)
        elif r.stream == "pp":
            _send(out, plan, r, pid, starts)
        elif r.stream == "optimizer":
            out.slice("optimizer step", "optimizer", pid, "optimizer", _us(r.start),
                      _us(r.end), {"params": _stage_params(plan, r.stage)})
        else:
            _dp(out, plan, r, pid)
    return {"traceEvents": _metadata(plan, out.used) + out.events, "displayTimeUnit": "ms",
            "otherData": _summary(plan, engine, result)}


def _phase(out: _Writer, plan: Any, r: Any, pid: int, detail: str) -> None:
    ph = plan.phases.get((r.name, r.stage, r.chunk))
    chunks = plan.engine_input.fwd.shape[1]
    name = f"{r.name} mb {r.mb}" + (f" chunk {r.chunk}" if chunks > 1 else "")
    args = {"stage": r.stage, "microbatch": r.mb, "chunk": r.chunk,
            "flops": ph.flops if ph else 0.0, "model_flops": ph.model_flops if ph else 0.0}
    cat = {"F": "forward", "W": "weight_grad"}.get(r.name, "backward")
    if getattr(r, "fused", False):
        args["overlapped"] = "F&B pair (DualPipe)"
    ps, pe = out.slice(name, cat, pid, "compute", _us(r.start), _us(r.end), args)
    fsdp = 0.0  # Megatron-FSDP's exposed gathers / reduce-scatters inside this phase
    added = getattr(plan, "fsdp_exposed", None)  # None: no FSDP (or a plan without it)
    if added is not None and (r.name == "B" or (
            r.name == "F" and plan.workload.training.params_sharded)):
        fsdp = float(added[r.name == "B"][r.stage, r.chunk, r.mb])
        out.slice(f"FSDP {'all-gather' if r.name == 'F' else 'all-gather + reduce-scatter'}",
                  "dp", pid, "dp", _us(r.start), _us(r.end),
                  {"exposed_us": _us(fsdp), "microbatch": r.mb, "chunk": r.chunk,
                   "note": "per-layer traffic pipelined with the phase's layers"})
    if detail != "op" or ph is None or not ph.ops:
        return
    busy = r.end - r.start - fsdp  # the ops' own time; the FSDP wait is not theirs
    stretch = busy / ph.duration if ph.duration > 0 else 1.0
    inner = pe  # compute kernels nest inside the phase, one after another
    child_end = ps
    for o in sorted(ph.ops, key=lambda o: o.start):
        start = r.start + o.start * stretch
        a = {"flops": o.flops, "bytes": o.nbytes, "microbatch": r.mb, "chunk": r.chunk,
             "phase": r.name}
        if o.stream == "compute":
            _, child_end = out.slice(o.name, "kernel", pid, "compute", _us(start),
                                     _us(start + o.duration * stretch), a,
                                     lo=child_end, hi=inner)
        else:
            out.slice(o.name, o.stream, pid, o.stream if o.stream in THREADS else "tp",
                      _us(start), _us(start + o.duration * stretch), a)


def _send(out: _Writer, plan: Any, r: Any, pid: int, starts: dict) -> None:
    phase = r.name.removeprefix("send_")
    dst, chunk = r.dst_stage, r.dst_chunk  # the engine's send rule, recorded
    what = "activation" if phase == "F" else "gradient"
    ts, te = out.slice(f"send {what} mb {r.mb} -> stage {dst}", "pp", pid, "pp",
                       _us(r.start), _us(r.end),
                       {"bytes": r.nbytes, "microbatch": r.mb, "chunk": r.chunk,
                        "to_stage": dst, "to_chunk": chunk})
    consumer = starts.get((dst, phase, r.mb, chunk))
    if consumer is None:
        return
    fid = len(out.events)
    flow = {"name": "p2p", "cat": "pp", "id": fid}
    out.events.append({**flow, "ph": "s", "pid": pid, "tid": THREADS["pp"][0], "ts": ts})
    out.events.append({**flow, "ph": "f", "bp": "e", "pid": dst + 1,
                       "tid": THREADS["compute"][0], "ts": max(_us(consumer), te)})


def _dp(out: _Writer, plan: Any, r: Any, pid: int) -> None:
    tr = plan.workload.training
    dist = tr.optimizer_sharded
    if r.name == "grad_sync":
        name = f"grad {'reduce-scatter' if dist else 'all-reduce'} chunk {r.chunk}"
        if tr.num_distributed_optimizer_instances > 1:  # then the shard across instances
            name += f" + all-reduce across {tr.num_distributed_optimizer_instances} instances"
        args = {"chunk": r.chunk, "bytes": r.nbytes}
    else:
        name = "param all-gather"
        args = {"bytes": r.nbytes, "note": "overlaps the next step's first forwards"}
    out.slice(name, "dp", pid, "dp", _us(r.start), _us(r.end), args)


def _stage_params(plan: Any, stage: int) -> float:
    return float(plan.stage_params[stage].total)


def _metadata(plan: Any, used: set[tuple[int, int]]) -> list[dict[str, Any]]:
    names = {tid: name for tid, name in THREADS.values()}
    part = plan.partition
    meta: list[dict[str, Any]] = []
    for pid in sorted({p for p, _ in used}):
        s = pid - 1
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                     "args": {"name": f"stage {s} ({part.stage_layers(s)} layers)"}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                     "args": {"sort_index": s}})
    for pid, tid in sorted(used):
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"name": names[tid]}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"sort_index": tid}})
    return meta


def _summary(plan: Any, engine: Any, result: Any) -> dict[str, Any]:
    w = plan.workload
    info: dict[str, Any] = {"workload": w.model.name, "topology": plan.topo.name,
                            "step_time_s": float(engine.step_time)}
    if result is not None:
        # the events are the ideal replay; the result's step adds the expected waits for
        # the slowest peers (breakdown_s["variability"]), which no event shows
        info.update(plan=result.plan, mfu=float(result.mfu),
                    step_time_expected_s=float(result.step_time_s),
                    breakdown_s={k: float(v) for k, v in result.breakdown_s.items()})
    return info


def write_trace(path: str | Path, trace: dict[str, Any]) -> Path:
    """Write the trace JSON atomically (temp file in the same directory, then rename).

    One ``json.dumps`` then one write: ``json.dump`` to a file writes chunk by chunk from
    Python (its C encoder is not used), about 3x slower for the same bytes."""
    atomic_write_text(path, json.dumps(trace, separators=(",", ":")))
    return Path(path)
