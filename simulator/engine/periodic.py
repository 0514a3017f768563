"""Long pipelines folded: the steady state replayed once, the rest extrapolated exactly.

A step list with ``m`` micro-batches is, on every stage, a warm-up, a *periodic* middle
of windows (:mod:`.windows`) and a drain. When the phase times do not depend on the
micro-batch (dense models: the arrays are constant along their last axis), the replay's
recurrence is *shift-invariant* in the middle: every time it computes is a ``max`` of,
or a sum with, times at most ``L`` windows away, the same way in every window. Max-plus
algebra gives the rest (Baccelli et al. 1992, *Synchronization and Linearity*, Ch. 3):
if, in a replay, every time in the windows ``[k0-2L, k0+2L+1]`` is the one of the
window before plus the same ``T``, then inserting ``n`` windows after window ``k0``
shifts every later time by exactly ``n*T`` (``max(a+T, b+T) = max(a, b) + T``, by
induction in dependency order; the checked zone covers every dependency that crosses
``k0``) and adds ``n`` copies of one window's sums (busy, p2p wait, F&B savings).

So :func:`fold` replays the schedule with ``n`` windows removed (a few hundred steps
instead of tens of thousands), checks that zone on its own times, replays it once more
with ``n-1`` removed, and writes ``X = X_a + n * (X_b - X_a)`` for every output (stage
statistics, bucket releases, link times, the record count). Results equal the full
replay's to float rounding (a few ulps of the step time per window;
``tests/test_engine_fold.py``). A steady state that repeats only every ``c`` windows
(stages of unequal speed) is folded ``c`` windows at a time. Anything else (times that
vary per micro-batch, as MoE router draws; too few windows; no periodic zone within
the transients tried; a deadlock) leaves the full replay to run. The attempts cost at most
:data:`BUDGET` of a full replay, and their outcome is remembered per schedule and times
(a repeated plan goes straight to what folded, or to the full replay).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from . import windows
from .records import NullRecorder, SpanRecorder

MIN_STEPS = 4000  # below this the full replay (a few ms) is as cheap as folding
SHRINK = 4  # fold only when the reduced replay has at most 1/SHRINK of the steps
BUDGET = 0.5  # of the full replay's steps: the most the attempts may cost (2 per step of a
# reduced replay: it keeps its times; cached per schedule) before the full replay runs
# (transient, c), tried in turn: a steady state repeating every c windows (stages of unequal
# speed: c > 1), reached after ``transient`` repetitions
ATTEMPTS = ((2, 1), (2, 2), (2, 3), (2, 4), (8, 1), (8, 2), (8, 3), (8, 4), (32, 1), (32, 2),
            (4, 12))
_PHASE_ARRAYS = ("fwd", "bwd", "wgrad", "fwd_ep", "bwd_ep")
_MEMO: dict[tuple, tuple] = {}  # schedule, route, times -> (.., the attempt that folded or -1)
_MAX_MEMO = 1024


def fold(sim: Any, replay_all: Callable[[Any], None], min_steps: int | None = None) -> bool:
    """Fill ``sim``'s results (as ``replay_all(sim)`` would) from two reduced replays;
    False, with ``sim`` untouched, when the schedule does not fold. ``min_steps``: fold
    only schedules with at least this many steps (default :data:`MIN_STEPS`)."""
    inp = sim.inp
    total = sum(len(x) for x in inp.schedule)
    if type(sim.rec) is not NullRecorder or total < (MIN_STEPS if min_steps is None
                                                     else min_steps):
        return False
    if not all(_flat(getattr(inp, a)) for a in _PHASE_ARRAYS):
        return False
    base = windows.shape(inp.schedule, inp.fwd.shape[2])
    if base is None:
        return False
    key = _memo_key(sim)
    known = _MEMO.get(key) if key is not None else None
    if known is not None and (known[0] is not sim.route or any(
            a is not b for a, b in zip(known[1], inp.schedule, strict=True))):
        known = None  # an id reused by another object
    if known is not None and known[2] < 0:
        return False  # these times on this schedule did not fold before
    order = list(range(len(ATTEMPTS)))
    if known is not None:
        order.insert(0, order.pop(known[2]))
    budget = BUDGET * total
    for i in order:
        transient, c = ATTEMPTS[i]
        shape = windows.grouped(base, c)
        # the reduced size if dependencies span one window (L = 1; more only makes it larger)
        least = total - (min(shape[3]) - transient - 6) * sum(shape[1])
        if SHRINK * least > total or 2 * least > budget:
            break
        plan = windows.layout(sim.route, inp.schedule, shape, transient)
        if plan is None:
            continue
        k0, n, reach, small, bigger, sends = plan
        size = sum(len(x) for x in small)
        budget -= 2 * size
        if budget < 0 or SHRINK * size > total:
            break
        a = _replay(sim, replay_all, small, n * shape[0], SpanRecorder(sim.p))
        if a is None or not _periodic_zone(a, sends, shape, k0, reach):
            continue
        b = _replay(sim, replay_all, bigger, (n - 1) * shape[0], NullRecorder())
        if b is None or not _same_buckets(a, b):
            continue
        _extrapolate(sim, a, b, n)
        _remember(key, sim, i)
        return True
    _remember(key, sim, -1)
    return False


def _memo_key(sim: Any) -> tuple | None:
    """What the replay's recurrence depends on: the step lists (immutable tuples, by
    identity), the route and the times of the first micro-batch (all are alike)."""
    inp = sim.inp
    if not all(isinstance(x, tuple) for x in inp.schedule):
        return None
    times = b"".join(getattr(inp, a)[..., 0].tobytes() for a in _PHASE_ARRAYS
                     if getattr(inp, a) is not None)
    return (tuple(id(x) for x in inp.schedule), id(sim.route), times, inp.p2p.tobytes(),
            inp.overlap_slowdown, inp.overlap_grad_reduce)


def _remember(key: tuple | None, sim: Any, attempt: int) -> None:
    """Keep the outcome, and the route and step lists it was keyed on (their ``id`` cannot
    be reused while the entry lives)."""
    if key is None:
        return
    if len(_MEMO) >= _MAX_MEMO:
        _MEMO.clear()
    _MEMO[key] = (sim.route, tuple(sim.inp.schedule), attempt)


def _flat(a: np.ndarray | None) -> bool:
    """Same time for every micro-batch (or absent)."""
    return a is None or bool((a == a[..., :1]).all())


def _replay(sim: Any, replay_all: Callable, schedule: tuple, fewer: int, rec: Any) -> Any:
    """A fresh sim of ``schedule`` (``fewer`` micro-batches less), replayed; None if stuck."""
    inp = sim.inp
    m = inp.fwd.shape[2] - fewer
    arrays = {a: getattr(inp, a)[..., :m] for a in _PHASE_ARRAYS if getattr(inp, a) is not None}
    r = type(sim)(dataclasses.replace(inp, schedule=list(schedule), route=sim.route, **arrays), rec)
    replay_all(r)
    return r if all(r.finished) else None


def _periodic_zone(r: Any, sends: list, shape: tuple, k0: int, reach: int) -> bool:
    """Every compute start and end and every send in windows [k0-2L, k0+2L+1] is the one a
    window earlier plus the same T > 0 (to 16 ulps of the latest time: rounding).
    ``sends``: per stage, the indices of the steps that send over a link."""
    _, period, start, _ = shape
    tol = 16 * np.finfo(float).eps * max(st.pipeline_end for st in r.stats)
    T = None
    for s, (P, a) in enumerate(zip(period, start, strict=True)):
        lo, hi = a + (k0 - 2 * reach) * P, a + (k0 + 2 * reach + 1) * P
        if lo < 0 or hi + P > len(r.rec.compute[s]):
            return False
        c = np.array(r.rec.compute[s][lo:hi + P])
        diff = c[P:] - c[:-P]
        T = diff[0, 0] if T is None else T
        if np.abs(diff - T).max() > tol:
            return False
        idx = sends[s]
        j0, j1, per = np.searchsorted(idx, (lo, hi, lo + P))
        per -= j0  # sends per window
        if j1 == j0:  # none in the middle: a later send must not wait for the link's last use
            if 0 < j1 < len(idx) and r.rec.sends[s][j1][0] != r.rec.compute[s][idx[j1]][1]:
                return False
            continue
        if per == 0 or j1 + per > len(idx) or (idx[j0 + per:j1 + per] - idx[j0:j1] != P).any():
            return False
        t = np.array(r.rec.sends[s][j0:j1 + per])
        if np.abs(t[per:] - t[:-per] - T).max() > tol:
            return False
    return T is not None and T > 0


def _same_buckets(a: Any, b: Any) -> bool:
    """Same gradient-bucket releases but for their times (none inside the windows)."""
    return all(len(x) == len(y) and all(u[1:] == w[1:] for u, w in zip(x, y, strict=True))
               for x, y in zip(a.dp_jobs, b.dp_jobs, strict=True))


def _extrapolate(sim: Any, a: Any, b: Any, n: int) -> None:
    """``sim``'s outputs as ``a + n * (b - a)``: ``b`` has one window more than ``a``."""
    def lin(x, y):
        return x + n * (y - x)

    for st, sa, sb in zip(sim.stats, a.stats, b.stats, strict=True):
        for f in dataclasses.fields(st):
            setattr(st, f.name, lin(getattr(sa, f.name), getattr(sb, f.name)))
    for s in range(sim.p):
        sim.dp_jobs[s] = [(lin(ja[0], jb[0]), *ja[1:])
                          for ja, jb in zip(a.dp_jobs[s], b.dp_jobs[s], strict=True)]
        sim.link_free[s] = lin(a.link_free[s], b.link_free[s])
        sim.finished[s] = True
    sim.rec.count += lin(a.rec.count, b.rec.count)
