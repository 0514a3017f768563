"""The event loop: see the package docstring for the model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import simpy

from ..schedules import Step


class Record(NamedTuple):
    """One interval on one stream of one simulated rank (seconds from step start)."""

    stage: int
    stream: str  # "compute" | "pp" | "dp" | "optimizer"
    name: str  # "F" | "B" | "send_F" | "send_B" | "grad_sync" | "optimizer" | "param_gather"
    start: float
    end: float
    mb: int
    chunk: int
    nbytes: float = 0.0  # bytes moved (transfers and collectives)


@dataclass
class EngineInput:
    """Durations (s) the engine replays; produced by :mod:`simulator.workload`.

    ``fwd[s, c, mb]`` / ``bwd[s, c, mb]``: phase durations; ``p2p[s]``: time to
    send one activation (or gradient) from stage s to its neighbour;
    ``dp_buckets[s][c]``: gradient-sync times of chunk c's buckets, in release
    order; ``optimizer[s]`` and ``param_gather[s]`` per stage.
    """

    schedule: list[list[Step]]
    fwd: np.ndarray
    bwd: np.ndarray
    p2p: np.ndarray
    dp_buckets: list[list[list[float]]]
    optimizer: np.ndarray
    param_gather: np.ndarray
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    overlap_slowdown: float = 0.0  # compute lost while DP comm overlaps it (fraction)
    p2p_bytes: float = 0.0  # one activation / gradient transfer
    dp_bucket_bytes: list[list[list[float]]] | None = None  # like dp_buckets
    param_gather_bytes: np.ndarray | None = None  # per stage


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


@dataclass
class EngineResult:
    step_time: float
    stages: list[StageStats]
    records: list[Record] = field(default_factory=list)
    events: int = 0


class _Sim:
    def __init__(self, inp: EngineInput):
        self.inp = inp
        self.p = len(inp.schedule)
        self.v = inp.fwd.shape[1]
        self.m = inp.fwd.shape[2]
        self.env = simpy.Environment()
        self.arrive: dict[tuple, simpy.Event] = {}
        self.sent_at: dict[tuple, float] = {}  # compute end of the producer
        self.link_free = [0.0] * self.p
        self.dp_jobs: list[list[tuple[float, float, int, float]]] = [[] for _ in range(self.p)]
        self.records: list[Record] = []
        self.stats = [StageStats() for _ in range(self.p)]

    def event(self, key: tuple) -> simpy.Event:
        ev = self.arrive.get(key)
        if ev is None:
            ev = self.arrive[key] = self.env.event()
        return ev

    def needs(self, s: int, st: Step) -> tuple | None:
        """Key of the transfer this step waits for, or None if its input is local."""
        if st.phase == "F":
            return None if (s == 0 and st.chunk == 0) else ("F", st.mb, st.chunk, s)
        if s == self.p - 1 and st.chunk == self.v - 1:
            return None
        return ("B", st.mb, st.chunk, s)

    def target(self, s: int, st: Step) -> tuple | None:
        """Key this step's output satisfies on the neighbour stage, or None."""
        if st.phase == "F":
            if s < self.p - 1:
                return ("F", st.mb, st.chunk, s + 1)
            return ("F", st.mb, st.chunk + 1, 0) if st.chunk < self.v - 1 else None
        if s > 0:
            return ("B", st.mb, st.chunk, s - 1)
        return ("B", st.mb, st.chunk - 1, self.p - 1) if st.chunk > 0 else None

    def send(self, s: int, key: tuple, mb: int, chunk: int, name: str) -> None:
        """Start a p2p transfer on stage s's link (one at a time, FIFO); fire ``key`` on arrival."""
        now = self.env.now
        start = max(now, self.link_free[s])
        end = start + float(self.inp.p2p[s])
        self.link_free[s] = end
        self.records.append(Record(s, "pp", name, start, end, mb, chunk, self.inp.p2p_bytes))
        arrival = self.event(key)
        self.env.timeout(end - now).callbacks.append(lambda _ev, a=arrival: a.succeed())

    def stage(self, s: int):
        env, inp, st_ = self.env, self.inp, self.stats[s]
        last_b = {c: max(st.mb for st in inp.schedule[s] if st.phase == "B" and st.chunk == c)
                  for c in range(self.v)}
        seen_b = False
        for st in inp.schedule[s]:
            key = self.needs(s, st)
            ready = env.now
            if key is not None:
                yield self.event(key)
                produced = self.sent_at.get(key, ready)
                st_.pp_wait += max(0.0, env.now - max(ready, produced))
            table = inp.fwd if st.phase == "F" else inp.bwd
            dur = float(table[s, st.chunk, st.mb])
            start = env.now
            if st.phase == "B" and st.mb == last_b[st.chunk] and inp.overlap_grad_reduce:
                self.release(s, st.chunk, start, dur)
            yield env.timeout(dur)
            self.records.append(Record(s, "compute", st.phase, start, env.now, st.mb, st.chunk))
            st_.busy += dur
            if st.phase == "F" and not seen_b:
                st_.warmup_fwd += dur
            seen_b = seen_b or st.phase == "B"
            out = self.target(s, st)
            if out is not None:
                self.sent_at[out] = env.now
                self.send(s, out, st.mb, st.chunk, "send_" + st.phase)
        st_.pipeline_end = env.now
        if not inp.overlap_grad_reduce:
            for c in range(self.v):
                self.release(s, c, env.now, 0.0)

    def release(self, s: int, c: int, start: float, dur: float) -> None:
        """Queue chunk c's gradient buckets, ready evenly over its last backward."""
        buckets = self.inp.dp_buckets[s][c]
        sizes = self.inp.dp_bucket_bytes[s][c] if self.inp.dp_bucket_bytes else [0.0] * len(buckets)
        n = len(buckets)
        for i, (t, size) in enumerate(zip(buckets, sizes, strict=True)):
            self.dp_jobs[s].append((start + dur * (i + 1) / n, t, c, size))

    def tail(self, s: int) -> None:
        """DP stream (FIFO by release time), optimizer, exposed parameter all-gather.

        Gradient sync never blocks compute in this model, so the DP stream is
        served after the replay, in release order, without events of its own.
        """
        inp, st_ = self.inp, self.stats[s]
        now = overlapped = 0.0
        for ready, t, c, size in sorted(self.dp_jobs[s], key=lambda j: j[0]):
            start = max(now, ready)
            now = start + t
            overlapped += max(0.0, min(now, st_.pipeline_end) - start)
            self.records.append(Record(s, "dp", "grad_sync", start, now, -1, c, size))
        # Buckets that ran beside the backward slowed it (SMs and HBM taken by NCCL).
        st_.grads_synced = max(now, st_.pipeline_end + inp.overlap_slowdown * overlapped)
        st_.optimizer = float(inp.optimizer[s])
        start = st_.grads_synced
        self.records.append(Record(s, "optimizer", "optimizer", start, start + st_.optimizer,
                                   -1, -1))
        start += st_.optimizer
        ag = float(inp.param_gather[s])
        if inp.overlap_param_gather:
            first = ag / max(1, len(self.dp_jobs[s]))
            exposed = max(first, ag - st_.warmup_fwd) if ag > 0 else 0.0
        else:
            exposed = ag
        if ag > 0:
            size = float(inp.param_gather_bytes[s]) if inp.param_gather_bytes is not None else 0.0
            self.records.append(Record(s, "dp", "param_gather", start, start + ag, -1, -1, size))
        st_.param_gather_exposed = exposed
        st_.end = start + exposed

    def run(self) -> EngineResult:
        for s in range(self.p):
            self.env.process(self.stage(s))
        self.env.run()
        for s in range(self.p):
            self.tail(s)
        step = max(st.end for st in self.stats)
        return EngineResult(step_time=step, stages=self.stats, records=self.records,
                            events=len(self.records))


def run_engine(inp: EngineInput) -> EngineResult:
    """Replay one step; returns per-stage statistics and the interval records."""
    return _Sim(inp).run()
