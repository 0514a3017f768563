"""The event loop: see the package docstring for the model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..schedules import Route, Schedule, Step, is_fused
from . import lockstep
from . import step_rule as rule
from .records import ListRecorder, NullRecorder, Record, Recorder
from .replay import replay
from .tail import StageStats, dp_tail

if TYPE_CHECKING:
    import simpy


@dataclass(eq=False)  # numpy fields: no value equality (nor its start-up cost)
class EngineInput:
    """Durations (s) the engine replays; produced by :mod:`simulator.workload`.

    ``fwd[s, c, mb]`` / ``bwd[s, c, mb]``: phase durations (``bwd`` is the full
    backward, input and weight gradients); ``p2p[s]``: time to send one
    activation (or gradient) from stage s to its neighbour;
    ``dp_buckets[s][c]``: gradient-sync times of chunk c's buckets, in release
    order; ``optimizer[s]`` and ``param_gather[s]`` per stage.

    Schedule-specific inputs, all optional: ``route``, the schedule's send rule
    (default: Megatron's, global chunk ``c*p + s``); ``wgrad[s, c, mb]``, the
    weight-gradient part of ``bwd`` that a ``W`` step runs (its ``B`` then runs
    the rest); ``fwd_ep`` / ``bwd_ep``, the exposed EP all-to-all time inside
    each phase, which an overlapped F&B pair hides under the other phase's
    compute; ``post_validation``: stages need not meet at the optimizer; ``lockstep``:
    per stage, the time slot of each step where the stack runs PyTorch's lock-step
    pipeline runtime (:mod:`.lockstep`), None for the asynchronous replay.
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
    overlap_slowdown: float = 0.0  # compute lost while comm overlaps it (fraction)
    p2p_bytes: float = 0.0  # one activation / gradient transfer
    dp_bucket_bytes: list[list[list[float]]] | None = None  # like dp_buckets
    param_gather_bytes: np.ndarray | None = None  # per stage
    route: Route | None = None
    wgrad: np.ndarray | None = None
    fwd_ep: np.ndarray | None = None
    bwd_ep: np.ndarray | None = None
    post_validation: bool = False
    lockstep: list[list[int]] | None = None


class ScheduleDeadlock(RuntimeError):
    """A schedule's order cannot be replayed: stages wait on each other forever."""


@dataclass
class EngineResult:
    step_time: float
    stages: list[StageStats]
    records: list[Record] = field(default_factory=list)
    events: int = 0


class _Sim:
    def __init__(self, inp: EngineInput, rec: Recorder):
        self.inp, self.rec = inp, rec
        self.p = len(inp.schedule)
        self.v = inp.fwd.shape[1]
        self.route = inp.route or Schedule().route(self.p, self.v)
        self.env: simpy.Environment  # made by the SimPy path only (see run)
        self.arrive: dict[tuple, simpy.Event] = {}
        self.sent_at: dict[tuple, float] = {}  # compute end of the producer
        self.link_free = [0.0] * self.p
        self.dp_jobs: list[list[tuple[float, float, int, float]]] = [[] for _ in range(self.p)]
        self.stats = [StageStats() for _ in range(self.p)]
        self.waiting: list[Step | None] = [None] * self.p  # step a stage is blocked on
        self.finished = [False] * self.p

    def event(self, key: tuple) -> simpy.Event:
        ev = self.arrive.get(key)
        if ev is None:
            ev = self.arrive[key] = self.env.event()
        return ev

    def send(self, s: int, st: Step, dst: tuple[int, int]) -> None:
        """Hand this step's output to ``dst``: locally at once, else over s's p2p link
        (one transfer at a time, FIFO), firing the consumer's key on arrival."""
        key = (st.phase, st.mb, dst[1], dst[0])
        self.sent_at[key] = self.env.now
        arrival = self.event(key)
        if dst[0] == s:  # a V shape's turn: same GPU, no transfer
            arrival.succeed()
            return
        now = self.env.now
        start, end, _ = rule.send(now, self.link_free[s], float(self.inp.p2p[s]))
        self.link_free[s] = end
        self.rec.add(Record(s, "pp", "send_" + st.phase, start, end, st.mb, st.chunk,
                            self.inp.p2p_bytes, dst[0], dst[1]))
        self.env.timeout(end - now).callbacks.append(lambda _ev, a=arrival: a.succeed())

    def duration(self, s: int, st: Step, split: set) -> float:
        """:func:`.step_rule.duration` of ``st`` on stage ``s``."""
        inp, at = self.inp, (s, st.chunk, st.mb)
        w = float(inp.wgrad[at]) if inp.wgrad is not None else 0.0
        return rule.duration(st.phase, float(inp.fwd[at]), float(inp.bwd[at]), w,
                             rule.is_split(st, split))

    def fused_slot(self, s: int, f: Step, b: Step, df: float, db: float) -> float:
        """:func:`.step_rule.fused_slot` of the F&B pair ``(f, b)`` on stage ``s``."""
        inp = self.inp
        if inp.fwd_ep is None or inp.bwd_ep is None:
            return rule.fused_slot(df, db, None, None, inp.overlap_slowdown)
        return rule.fused_slot(df, db, float(inp.fwd_ep[s, f.chunk, f.mb]),
                               float(inp.bwd_ep[s, b.chunk, b.mb]), inp.overlap_slowdown)

    def stage(self, s: int):
        env, inp, st_ = self.env, self.inp, self.stats[s]
        steps = inp.schedule[s]
        split = rule.split_pairs(steps)
        grad_done = rule.grad_done(steps, split)
        seen_b = False
        i = 0
        while i < len(steps):
            group = steps[i:i + 2] if is_fused(steps[i]) else steps[i:i + 1]
            ready = env.now
            for x in group:
                if self.route.waits(s, x):
                    key = (x.phase, x.mb, x.chunk, s)
                    self.waiting[s] = x
                    yield self.event(key)
                    produced = self.sent_at.get(key, ready)
                    st_.pp_wait += max(0.0, env.now - max(ready, produced))
                    ready = env.now
            durs = [self.duration(s, x, split) for x in group]
            slot = self.fused_slot(s, *group, *durs) if len(group) == 2 else durs[0]
            st_.fb_saved += sum(durs) - slot
            start = env.now
            if st_.first_start < 0:
                st_.first_start = start
            parts = rule.shares(slot, durs)
            t = start
            for k, (x, share) in enumerate(zip(group, parts, strict=True)):
                if grad_done.get(x.chunk) == i + k and inp.overlap_grad_reduce:
                    self.release(s, x.chunk, t, share)
                t += share
            yield env.timeout(slot)
            t = start
            for x, share in zip(group, parts, strict=True):
                self.rec.add(Record(s, "compute", x.phase, t, t + share, x.mb, x.chunk,
                                    fused=len(group) == 2))
                t += share
                if x.phase == "F" and not seen_b:
                    st_.warmup_fwd += share
                seen_b = seen_b or x.phase == "B"
            st_.busy += slot
            for x in group:
                dst = self.route.dst(s, x)
                if dst is not None:
                    self.send(s, x, dst)
            i += len(group)
        st_.pipeline_end = env.now
        self.finished[s] = True
        if not inp.overlap_grad_reduce:
            for c in range(self.v):
                self.release(s, c, env.now, 0.0)

    def release(self, s: int, c: int, start: float, dur: float) -> None:
        """Queue chunk c's gradient buckets, ready evenly over the step that completes them."""
        buckets = self.inp.dp_buckets[s][c]
        sizes = self.inp.dp_bucket_bytes[s][c] if self.inp.dp_bucket_bytes else [0.0] * len(buckets)
        n = len(buckets)
        for i, (t, size) in enumerate(zip(buckets, sizes, strict=True)):
            self.dp_jobs[s].append((start + dur * (i + 1) / n, t, c, size))

    def run(self, direct: bool) -> EngineResult:
        if self.inp.lockstep is not None:
            lockstep.replay(self)  # slot order is time order: one path for both engines
        elif direct:
            replay(self)
        else:
            # Loaded here, not at the top: the direct replay (every plain `run`) needs no
            # event loop, and start-up is budgeted (benchmarks/bench_startup.py).
            import simpy
            self.env = simpy.Environment()
            for s in range(self.p):
                self.env.process(self.stage(s))
            self.env.run()
        stuck = [f"stage {s} waits for {self.waiting[s]}" for s in range(self.p)
                 if not self.finished[s]]
        if stuck:
            raise ScheduleDeadlock("the schedule's order deadlocks: " + "; ".join(stuck))
        for s in range(self.p):
            dp_tail(self.inp, s, self.stats[s], self.dp_jobs[s], self.rec)
        if self.inp.post_validation:
            step = max(st.end - max(0.0, st.first_start) for st in self.stats)
        else:
            step = max(st.end for st in self.stats)
        return EngineResult(step_time=step, stages=self.stats, records=self.rec.records,
                            events=self.rec.count)


ENGINES = ("auto", "simpy", "direct")


def run_engine(inp: EngineInput, recorder: Recorder | None = None,
               engine: str = "auto") -> EngineResult:
    """Replay one step; returns per-stage statistics and the interval records.

    ``recorder``: where records go; default a :class:`ListRecorder` (all kept).
    Pass a :class:`NullRecorder` when nobody reads them.
    ``engine``: ``"simpy"`` (the event loop, records in time order),
    ``"direct"`` (:mod:`.replay`, same times, records grouped per stage) or
    ``"auto"``: direct when the recorder is a :class:`NullRecorder`.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    rec = recorder if recorder is not None else ListRecorder()
    direct = engine == "direct" or (engine == "auto" and isinstance(rec, NullRecorder))
    return _Sim(inp, rec).run(direct)
