"""The periodic middle of a schedule, and the same schedule with windows of it removed.

In the middle of a step list, step ``i + P_s`` is step ``i`` with the micro-batch
advanced by ``D`` (1F1B: ``P_s = 2``, ``D = 1``; zero-bubble: ``P_s = 3``; DualPipe:
``P_s = 4``, both directions). Stage ``s``'s *window* ``k`` is its steps
``[a_s + k*P_s, a_s + (k+1)*P_s)`` from the first periodic step ``a_s``; warm-up steps
have negative windows, drain steps windows past the last periodic one. Removing
windows ``k0+1 .. k0+n`` on every stage and renumbering every later micro-batch by
``-n*D`` leaves a schedule of the same form with ``n*D`` fewer micro-batches: each
dependency of its periodic part spans the same number of windows as before.

Only structure here (orders, routes), no times; :mod:`.periodic` replays and checks.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import step_rule as rule

MIN_WINDOWS = 16  # fewer periodic windows than this: not worth folding
_MAX_PERIOD = 512  # steps searched for the next copy of the middle step
_SHAPES: dict[tuple, tuple] = {}
_LAYOUTS: dict[tuple, tuple] = {}
_MAX_CACHED = 256  # entries; cleared when full
_MB, _KIND = operator.itemgetter(1), operator.itemgetter(0, 2)


def shape(schedule: list, m: int) -> tuple | None:
    """(D, P_s, a_s, W_s): micro-batch shift, steps per window, first periodic step and
    whole periodic windows of each stage, for the smallest D with at least
    :data:`MIN_WINDOWS` windows on every stage; None if none. Cached per step lists."""
    return _cached(_SHAPES, schedule, (m,), lambda: _shape(schedule, m))


def grouped(base: tuple, c: int) -> tuple:
    """``base`` with ``c`` windows taken as one (a steady state that repeats every ``c``)."""
    d, period, start, windows = base
    return d * c, [P * c for P in period], start, [w // c for w in windows]


def layout(route: Any, schedule: list, shape_: tuple, transient: int) -> tuple | None:
    """(k0, n, L, schedule without windows k0+1..k0+n, the same without n-1, the first's
    indices of the steps that send over a link per stage) with ``transient`` windows
    before a checked zone ``[k0-2L, k0+2L+1]``, L the most windows a dependency spans;
    None if too few windows. Cached per step lists, route and shape."""
    extra = (id(route), transient, shape_[0], shape_[1][0])
    return _cached(_LAYOUTS, schedule, extra, lambda: _layout(route, schedule, shape_, transient),
                   keep=route)


def _cached(cache: dict, schedule: list, extra: tuple, make, keep: Any = None):
    """``make()`` memoised on the identity of immutable step lists (tuples); the entry
    holds the objects it was keyed on, so an ``id`` cannot be reused while it lives."""
    if not all(isinstance(x, tuple) for x in schedule):
        return make()
    key = tuple(id(x) for x in schedule) + extra
    hit = cache.get(key)
    if hit is not None and hit[0] is keep and all(
            a is b for a, b in zip(hit[1], schedule, strict=True)):
        return hit[2]
    out = make()
    if len(cache) >= _MAX_CACHED:
        cache.clear()
    cache[key] = (keep, tuple(schedule), out)
    return out


def _shape(schedule: list, m: int) -> tuple | None:
    p = len(schedule)
    for d in sorted({1, 2, p, 2 * p}):
        if d * MIN_WINDOWS > m:
            break
        out = _periodic(schedule, d)
        if out is not None:
            return out
    return None


def _periodic(schedule: list, d: int) -> tuple | None:
    period, start, windows = [], [], []
    for steps in schedule:
        P = _next_copy(steps, d)
        if P is None:
            return None
        a, n = _longest_run(_copies(steps, P, d))
        period.append(P)
        start.append(a)
        windows.append((n + P) // P)  # steps [a, a+n+P) are periodic
    if min(windows) < MIN_WINDOWS:
        return None
    return d, period, start, windows


def _copies(steps: tuple, P: int, d: int) -> np.ndarray:
    """Whether step ``i + P`` is step ``i`` with the micro-batch advanced by ``d`` (same
    phase, chunk and kind, and for a B whether a W splits it: its duration), for each
    ``i`` (C-level maps: this reads every step)."""
    n = len(steps) - P
    mb = np.fromiter(map(_MB, steps), dtype=np.int64, count=len(steps))
    kind = list(map(_KIND, steps))
    types = list(map(type, steps))
    same = np.fromiter(map(operator.eq, kind[P:], kind), dtype=bool, count=n)
    same &= np.fromiter(map(operator.is_, types[P:], types), dtype=bool, count=n)
    split = rule.split_pairs(steps)
    if split:
        cut = np.array([rule.is_split(x, split) for x in steps])
        same &= cut[P:] == cut[:-P]
    return same & (mb[P:] - mb[:-P] == d)


def _next_copy(steps: tuple, d: int) -> int | None:
    """Steps from the middle one to its next copy with the micro-batch advanced by d."""
    mid = len(steps) // 2
    if mid == 0:
        return None
    ph, mb, c = steps[mid][0], steps[mid][1] + d, steps[mid][2]
    for j in range(mid + 1, min(len(steps), mid + _MAX_PERIOD)):
        y = steps[j]
        if y[1] == mb and y[0] == ph and y[2] == c:
            return j - mid
    return None


def _longest_run(flags: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True."""
    edges = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    if len(starts) == 0:
        return 0, 0
    k = int(np.argmax(ends - starts))
    return int(starts[k]), int(ends[k] - starts[k])


def reduced(schedule: list, shape_: tuple, k0: int, n: int) -> tuple[tuple, ...]:
    """``schedule`` without windows ``k0+1 .. k0+n``, later micro-batches renumbered."""
    d, period, start, _ = shape_
    shift = n * d
    out = []
    for steps, P, a in zip(schedule, period, start, strict=True):
        cut, resume = a + (k0 + 1) * P, a + (k0 + 1 + n) * P
        out.append(tuple(steps[:cut]) + tuple(type(x)(x[0], x[1] - shift, x[2])
                                              for x in steps[resume:]))
    return tuple(out)


def _valid(schedule: tuple, m: int) -> bool:
    """Each stage lists every (phase, micro-batch, chunk) at most once, micro-batches in
    ``[0, m)`` (a missing input shows as a deadlock of the replay)."""
    for steps in schedule:
        if len({(x[0], x[1], x[2]) for x in steps}) != len(steps):
            return False
        if min(x[1] for x in steps) < 0 or max(x[1] for x in steps) >= m:
            return False
    return True


def _hops(route: Any, s: int, steps: tuple) -> list[tuple[bool, Any]]:
    """(waits, dst) of each step; the route answers per (phase, chunk), asked once."""
    table: dict[tuple[str, int], tuple[bool, Any]] = {}
    out = []
    for x in steps:
        hop = table.get((x[0], x[2]))
        if hop is None:
            hop = table[x[0], x[2]] = (route.waits(s, x), route.dst(s, x))
        out.append(hop)
    return out


def _reach(hops: list, schedule: tuple, shape_: tuple) -> int:
    """L: the most windows a dependency spans (a p2p input; the own order and the send
    link span at most one window)."""
    _, period, start, _ = shape_
    made = {}
    for s, steps in enumerate(schedule):
        a, P = start[s], period[s]
        for i, (x, (_, dst)) in enumerate(zip(steps, hops[s], strict=True)):
            if dst is not None:
                made[(x[0], x[1], dst[1], dst[0])] = (i - a) // P
    reach = 1
    for s, steps in enumerate(schedule):
        a, P = start[s], period[s]
        for i, (x, (waits, _)) in enumerate(zip(steps, hops[s], strict=True)):
            if waits:
                src = made.get((x[0], x[1], x[2], s))
                if src is None:
                    return -1  # an input nobody sends: not a valid reduction
                reach = max(reach, abs((i - a) // P - src))
    return reach


def _layout(route: Any, schedule: list, shape_: tuple, transient: int) -> tuple | None:
    d, windows = shape_[0], shape_[3]
    m = 1 + max(x[1] for steps in schedule for x in steps)
    reach = 1
    while True:  # L measured on the reduced schedule: its periodic part spans the same
        k0 = transient + 2 * reach
        n = min(windows) - (k0 + 2 * reach + 2)  # zone [k0-2L, k0+2L+1] kept
        if n < 2:
            return None
        small = reduced(schedule, shape_, k0, n)
        if not _valid(small, m - n * d):
            return None
        hops = [_hops(route, s, x) for s, x in enumerate(small)]
        spans = _reach(hops, small, shape_)
        if spans < 0:
            return None
        if spans <= reach:
            sends = [np.array([i for i, (_, to) in enumerate(h) if to is not None and to[0] != s],
                              dtype=np.intp) for s, h in enumerate(hops)]
            return k0, n, reach, small, reduced(schedule, shape_, k0, n - 1), sends
        reach = spans
