"""Direct replay: the SimPy engine's times from a list-scheduling recurrence, no events.

Every schedule here is *static*: each stage runs its step list in order, and a
step starts at ``max(the stage's previous step end, its input's arrival)``.
A send leaves over the stage's FIFO link at ``max(producer end, link free)``
and arrives ``p2p[s]`` later. A stage's times therefore depend only on its
own order and on the arrival times of its inputs, never on what other stages
do at the same instant, so processing the stages in any order that respects
the data dependencies gives the same numbers as SimPy's time-ordered event
loop. This module walks the stages with a work list: a stage runs until it
needs an input that has not been produced yet, registers itself as that
input's waiter, and is resumed when the producer sends it.

Identical to :meth:`simulator.engine.core._Sim.stage` float for float: both take a
step's duration, W split, F&B slot and send from :mod:`.step_rule`; the clock after a
wait is ``max(now, arrival)``; a phase ends at ``start + slot`` (``timeout(slot)``);
gradient-bucket releases and the statistics follow the same expressions in the same order
(``tests/test_engine_replay.py`` compares every field on every schedule).
What differs is only the *order* of the records: per stage, not by time, so
the engine uses this path when the caller discards records
(:class:`~.records.NullRecorder`, the plain ``run`` / ``simulate`` / sweep
path) and SimPy when the trace or timeline reads them.

Cost: O(steps) at about a microsecond each, no event queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import numpy as np

from ..schedules import is_fused
from . import lean
from . import step_rule as rule
from .periodic import fold
from .records import NullRecorder, Record, SpanRecorder


def replay(sim: Any) -> None:
    """Run every stage of ``sim`` (a :class:`~.core._Sim`) to its end or until it deadlocks.

    Fills ``sim.stats``, ``sim.dp_jobs``, ``sim.finished``, ``sim.waiting``,
    ``sim.link_free`` and the recorder, as the SimPy processes would. A long schedule
    with a periodic middle and micro-batch-independent times is folded
    (:mod:`.periodic`: two short replays, extrapolated exactly).
    """
    if not fold(sim, replay_all):
        replay_all(sim)


def replay_all(sim: Any) -> None:
    """:func:`replay` without folding: every step of every stage."""
    inp, p = sim.inp, sim.p
    compiled = [_Stage(sim, s) for s in range(p)]
    if (type(sim.rec) is NullRecorder and all(c.facts is not None for c in compiled)
            and lean.replay(sim, [c.facts for c in compiled], [c.dur for c in compiled])):
        return  # records only counted, no fused pair, no deadlock: the counting replay
    data = _Data(inp)
    # an input's key is a number (:func:`_key`): its (arrival, producer end), its waiting stage
    size = 2 * inp.fwd.shape[2] * inp.fwd.shape[1] * p
    arrive: list[tuple[float, float] | None] = [None] * size
    waiters = [-1] * size
    runnable = list(range(p - 1, -1, -1))
    stages = [c.run(sim, data, arrive, waiters, runnable) for c in compiled]
    while runnable:
        s = runnable.pop()
        key = next(stages[s], None)
        if key is not None:
            waiters[key] = s


class _Data:
    """What the steps read one by one, as Python lists (same float64 values, cheap to index):
    the EP all-to-all times of F&B pairs and the p2p times (phase durations are gathered
    per stage with numpy, :func:`_durations`)."""

    def __init__(self, inp: Any):
        self.ep = (inp.fwd_ep.tolist(), inp.bwd_ep.tolist()) \
            if inp.fwd_ep is not None and inp.bwd_ep is not None else None
        self.p2p = [float(x) for x in inp.p2p]


class _Stage:
    """One stage's step list, compiled to flat per-step facts; :meth:`run` replays it.

    Per step: the arrival key it waits for (or None), its duration (unfused
    steps), the chunk whose gradient buckets it releases (or -1), and the key
    and locality of its send (or None).
    """

    __slots__ = ("data", "dst", "dur", "facts", "fused", "phases", "rel", "s", "split", "steps",
                 "wait")

    def __init__(self, sim: Any, s: int):
        self.s = s
        steps = self.steps = sim.inp.schedule[s]
        (self.phases, self.split, self.fused, self.wait, self.rel, self.dst, index,
         self.facts) = _structure(steps, sim.route, s, sim.inp.overlap_grad_reduce,
                                  sim.inp.fwd.shape)
        self.dur = _durations(s, index, sim.inp)

    def run(self, sim: Any, data: _Data, arrive: list, waiters: list,
            runnable: list) -> Iterator[int]:
        """Run the stage's steps; yields the key of an absent input and resumes once it
        has arrived (a generator keeps the stage's clock and sums between waits)."""
        self.data = data
        s, steps, fused, wait, dur, rel, dsts = (self.s, self.steps, self.fused, self.wait,
                                                 self.dur, self.rel, self.dst)
        inp, st_, rec = sim.inp, sim.stats[s], sim.rec
        count_only = isinstance(rec, NullRecorder)
        spans = type(rec) is SpanRecorder  # (start, end) pairs only: the fold's zone check
        done, sent = (rec.compute[s], rec.sends[s]) if spans else (None, None)
        p2p, link = self.data.p2p[s], sim.link_free[s]
        pp_wait, busy, warm = st_.pp_wait, st_.busy, st_.warmup_fwd
        n, i, now, seen_b = len(steps), 0, 0.0, False
        phases, started, counted = self.phases, False, 0
        while i < n:
            if fused[i]:
                st_.pp_wait, st_.busy, st_.warmup_fwd = pp_wait, busy, warm
                sim.link_free[s] = link
                out = self._pair(sim, i, now, seen_b, arrive, waiters, runnable)
                if out is None:
                    first = wait[i]
                    blocked = first if first is not None and arrive[first] is None else wait[i + 1]
                    sim.waiting[s] = steps[i] if blocked == first else steps[i + 1]
                    yield blocked
                    continue
                now, seen_b = out
                pp_wait, busy, warm, link = (st_.pp_wait, st_.busy, st_.warmup_fwd,
                                             sim.link_free[s])
                i += 2
                continue
            key = wait[i]
            if key is not None:
                got = arrive[key]
                if got is None:
                    sim.waiting[s] = steps[i]
                    yield key
                    got = arrive[key]
                at, produced = got
                # pp_wait += max(0, now' - max(now, produced)), inlined (same floats)
                late = (at if at > now else now) - (now if now >= produced else produced)
                if at > now:
                    now = at
                if late > 0.0:
                    pp_wait += late
            d = dur[i]
            start = now
            if not started:
                st_.first_start, started = start, True
            r = rel[i]
            if r >= 0:
                sim.release(s, r, start, d)
            now = start + d
            ph = phases[i]
            if count_only:
                counted += 1
            elif spans:
                counted += 1
                done.append((start, now))
            else:
                x = steps[i]
                rec.add(Record(s, "compute", ph, start, start + d, x[1], x[2]))
            if ph == "F":
                if not seen_b:
                    warm += d
            elif ph == "B":
                seen_b = True
            busy += d
            out = dsts[i]
            if out is not None:
                dkey, local, k = out
                if local:
                    arrive[k] = (now, now)
                else:  # step_rule.send, inlined in this loop (same floats)
                    t0 = now if now > link else link
                    link = t0 + p2p
                    if count_only:
                        counted += 1
                    elif spans:
                        counted += 1
                        sent.append((t0, link))
                    else:
                        rec.add(Record(s, "pp", "send_" + ph, t0, link, dkey[1], steps[i][2],
                                       inp.p2p_bytes, dkey[3], dkey[2]))
                    arrive[k] = (now + (link - now), now)
                waiter = waiters[k]
                if waiter >= 0:
                    waiters[k] = -1
                    runnable.append(waiter)
            i += 1
        st_.pp_wait, st_.busy, st_.warmup_fwd = pp_wait, busy, warm
        sim.link_free[s] = link
        rec.count += counted
        st_.pipeline_end = now
        sim.finished[s] = True
        if not inp.overlap_grad_reduce:
            for c in range(sim.v):
                sim.release(s, c, now, 0.0)

    def _pair(self, sim, i, now, seen_b, arrive, waiters, runnable):
        """An F&B pair as one slot (:func:`.step_rule.fused_slot`, its shares); None if an
        input is absent."""
        s, st_, inp, data = self.s, sim.stats[self.s], sim.inp, self.data
        group = self.steps[i:i + 2]
        keys = self.wait[i:i + 2]
        if any(k is not None and arrive[k] is None for k in keys):
            return None
        ready = now
        for k in keys:
            if k is not None:
                at, produced = arrive[k]
                now = at if at > now else now
                st_.pp_wait += max(0.0, now - max(ready, produced))
                ready = now
        durs = [self.dur[i], self.dur[i + 1]]
        slot = _fused_slot(s, group[0], group[1], durs[0], durs[1], data.ep,
                           inp.overlap_slowdown)
        st_.fb_saved += sum(durs) - slot
        start = now
        if st_.first_start < 0:
            st_.first_start = start
        shares = rule.shares(slot, durs)
        t = start
        for k, share in enumerate(shares):
            if self.rel[i + k] >= 0:
                sim.release(s, self.rel[i + k], t, share)
            t += share
        now = start + slot
        t = start
        for x, share in zip(group, shares, strict=True):
            sim.rec.add(Record(s, "compute", x[0], t, t + share, x[1], x[2], fused=True))
            t += share
            if x[0] == "F" and not seen_b:
                st_.warmup_fwd += share
            seen_b = seen_b or x[0] == "B"
        st_.busy += slot
        for k, x in enumerate(group):
            if self.dst[i + k] is not None:
                _send(sim, s, x, self.dst[i + k], now, data.p2p, arrive, waiters, runnable)
        return now, seen_b


_STRUCTURES: dict[tuple, tuple] = {}
_CODE = {"F": 0, "B": 1, "W": 2}
_MB, _CHUNK = itemgetter(1), itemgetter(2)
_MAX_STRUCTURES = 4096  # stages' worth; cleared when full


def _structure(steps, route, s: int, overlap_grad: bool, shape: tuple) -> tuple:
    """(phases, split, fused, wait, rel, dst, index, facts) of stage s: what depends on the
    order and the route only, not on times (``facts``: :class:`.lean.Facts`, None with a
    fused pair). Shared step lists (tuples from ``shape.schedule_steps``, one
    route per size) are compiled once; the cache keeps the objects it was keyed on, so an
    ``id`` cannot be reused while its entry lives."""
    if not isinstance(steps, tuple):
        return _compile(steps, route, s, overlap_grad, shape)
    key = (id(steps), id(route), s, overlap_grad, shape)
    hit = _STRUCTURES.get(key)
    if hit is not None and hit[0] is steps and hit[1] is route:
        return hit[2]
    if len(_STRUCTURES) >= _MAX_STRUCTURES:
        _STRUCTURES.clear()
    out = _compile(steps, route, s, overlap_grad, shape)
    _STRUCTURES[key] = (steps, route, out)
    return out


def _key(ph: str, mb: int, c: int, s: int, shape: tuple) -> int:
    """The number of the input (phase F or B, micro-batch, chunk) of stage s: an index into
    the replay's arrival list, ``shape`` the phase arrays' (stages, chunks, micro-batches)."""
    p, n, m = shape
    return (((ph == "B") * m + mb) * n + c) * p + s


def _compile(steps, route, s: int, overlap_grad: bool, shape: tuple) -> tuple:
    """Per step: phase, fused, wait key, send (see :class:`_Stage`). The route is asked once
    per (phase, chunk) (it reads nothing else of a step), and a key is that pair's
    micro-batch-0 key plus ``mb * chunks * stages`` (:func:`_key` is linear in the
    micro-batch), so the loop over the steps calls no function."""
    p, n, _ = shape
    per_mb = n * p
    split = rule.split_pairs(steps)
    phases, wait, dst = [], [], []
    table: dict[tuple[str, int], tuple] = {}  # (phase, chunk) -> _hop
    for x in steps:
        ph, mb, c = x
        hop = table.get((ph, c))
        if hop is None:
            hop = table[ph, c] = _hop(route, s, x, shape)
        wait0, d, dst0 = hop
        off = mb * per_mb
        phases.append(ph)
        wait.append(None if wait0 is None else wait0 + off)
        dst.append(None if d is None else ((ph, mb, d[1], d[0]), d[0] == s, dst0 + off))
    rel = [-1] * len(steps)
    if overlap_grad:  # the step completing a chunk's weight gradients releases its buckets
        for c, i in rule.grad_done(steps, split).items():
            rel[i] = c
    index = (np.array([_CODE[ph] for ph in phases], dtype=np.int8),
             np.fromiter(map(_CHUNK, steps), dtype=np.intp, count=len(steps)),
             np.fromiter(map(_MB, steps), dtype=np.intp, count=len(steps)),
             np.array([rule.is_split(x, split) for x in steps], dtype=bool))
    fused = list(map(is_fused, steps))
    facts = None if any(fused) else lean.compile_facts(phases, wait, rel, dst)
    return phases, split, fused, wait, rel, dst, index, facts


def _hop(route, s: int, x, shape: tuple) -> tuple:
    """(wait key or None, destination (stage, chunk) or None, its key) of step x's (phase,
    chunk) at micro-batch 0."""
    ph, _, c = x
    d = route.dst(s, x)
    return (_key(ph, 0, c, s, shape) if route.waits(s, x) else None, d,
            None if d is None else _key(ph, 0, d[1], d[0], shape))


def _durations(s: int, index: tuple, inp: Any) -> list[float]:
    """Each step's seconds (:func:`.step_rule.durations`), gathered with the compiled
    (phase, chunk, micro-batch) indices."""
    code, c, mb, cut = index
    w = inp.wgrad[s][c, mb] if inp.wgrad is not None else np.zeros(len(code))
    return rule.durations(code, inp.fwd[s][c, mb], inp.bwd[s][c, mb], w, cut).tolist()


def _fused_slot(s, f, b, df, db, ep, slowdown) -> float:
    """:func:`.step_rule.fused_slot` with the EP times from the replay's lists."""
    if ep is None:
        return rule.fused_slot(df, db, None, None, slowdown)
    return rule.fused_slot(df, db, ep[0][s][f[2]][f[1]], ep[1][s][b[2]][b[1]], slowdown)


def _send(sim, s, x, out, now, p2p, arrive, waiters, runnable) -> None:
    """:func:`.step_rule.send`: local hand-over at once, else the FIFO link."""
    key, local, k = out
    if local:
        arrive[k] = (now, now)
    else:
        start, end, at = rule.send(now, sim.link_free[s], p2p[s])
        sim.link_free[s] = end
        sim.rec.add(Record(s, "pp", "send_" + x[0], start, end, x[1], x[2],
                           sim.inp.p2p_bytes, key[3], key[2]))
        arrive[k] = (at, now)
    waiter = waiters[k]
    if waiter >= 0:
        waiters[k] = -1
        runnable.append(waiter)
