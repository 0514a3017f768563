"""A static replay order: every stage's steps cut into runs that never wait for an input.

The replay (:mod:`.replay`) runs a stage until it needs an input that has not been
produced yet, then another stage, and so on. *Whether* an input has been produced by
then does not depend on any time, only on the step lists and the route: producing it
means running the step that sends it. So the order in which that work list runs the
steps (stage ``s``, steps ``i`` to ``j``; then stage ``s'``, ...) is a property of the
schedule alone, found once without times and kept (:func:`order`), and the counting
replay (:mod:`.lean`) then walks it as one flat loop: no stage ever finds an input
missing, so none has to stop, register as a waiter and be woken. The float operations
per step are those of the work list (any order that produces each input before it is
read gives the same times: a stage's times depend only on its own steps and its
inputs' arrivals); only the bookkeeping around them is gone.

A schedule that deadlocks has no such order (:func:`order` returns None) and is left to
:mod:`.replay`, which reports the waiting steps.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, NamedTuple


class Order(NamedTuple):
    """The flat replay order of a schedule: one stream of (key, duration, send) steps.

    ``wait[i] >= 0``: a step that waits for input ``wait[i]``; ``-1``: one that waits for
    nothing; ``<= -2``: a marker, ``-2 - code``: ``code < stages`` switches to that
    stage, ``code - stages`` releases that chunk's gradient buckets with the duration the
    next step will run (the marker sits between the step's wait, a step of duration 0,
    and its run, a step that waits for nothing: ``now + 0.0`` is ``now``, so the times
    are those of the step unsplit). ``dst`` as :class:`.lean.Facts`; ``take[i]`` indexes
    the stages' durations concatenated, ``len`` of them (a 0.0 appended) for none."""

    wait: list[int]
    dst: list[int]
    take: list[int]
    pick: Callable[[list[float]], tuple[float, ...]]  # the durations in ``take`` order


_ORDERS: dict[tuple, tuple] = {}
_MAX_ORDERS = 64  # schedules' worth (a long one holds ~10^4 steps); cleared when full


def order(facts: list[Any], size: int) -> Order | None:
    """The replay order of the stages' :class:`.lean.Facts`, or None if they deadlock.
    Remembered per facts (compiled once per shared step list, :func:`.replay._structure`);
    the cache keeps the objects it was keyed on, so an ``id`` cannot be reused meanwhile."""
    key = tuple(map(id, facts))
    hit = _ORDERS.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], facts, strict=True)):
        return hit[1]
    if len(_ORDERS) >= _MAX_ORDERS:
        _ORDERS.clear()
    out = _find(facts, size)
    _ORDERS[key] = (tuple(facts), out)
    return out


def _find(facts: list[Any], size: int) -> Order | None:
    """The replay's work list without times (``size`` inputs): which steps run in turn."""
    p = len(facts)
    ready = bytearray(size)
    waiters = [-1] * size
    pos = [0] * p
    runnable = list(range(p - 1, -1, -1))
    spans: list[tuple[int, int, int]] = []
    while runnable:
        s = runnable.pop()
        wait, dst = facts[s].wait, facts[s].dst
        i = start = pos[s]
        n = len(wait)
        while i < n:
            key = wait[i]
            if key >= 0 and not ready[key]:
                waiters[key] = s
                break
            k = dst[i]
            if k != -1:
                k = k if k >= 0 else -2 - k
                ready[k] = 1
                if waiters[k] >= 0:
                    runnable.append(waiters[k])
                    waiters[k] = -1
            i += 1
        if i > start:
            spans.append((s, start, i))
        pos[s] = i
    if any(pos[s] < len(facts[s].wait) for s in range(p)):
        return None
    base = [0] * p
    for s in range(1, p):
        base[s] = base[s - 1] + len(facts[s - 1].wait)
    zero = base[-1] + len(facts[-1].wait)  # the 0.0 after the durations
    wait: list[int] = []
    dst: list[int] = []
    take: list[int] = []
    for s, i, j in spans:
        f = facts[s]
        wait.append(-2 - s)
        dst.append(-1)
        take.append(zero)
        for x in range(i, j):
            if f.rel[x] < 0:
                wait.append(f.wait[x])
                dst.append(f.dst[x])
                take.append(base[s] + x)
            else:  # its wait, the release, then its run
                wait += [f.wait[x], -2 - p - f.rel[x], -1]
                dst += [-1, -1, f.dst[x]]
                take += [zero, base[s] + x, base[s] + x]
    return Order(wait, dst, take, _picker(take))


def _picker(take: list[int]) -> Callable[[list[float]], tuple[float, ...]]:
    """``lambda xs: tuple(xs[i] for i in take)`` as one C call (:func:`operator.itemgetter`),
    built once: with thousands of indices, building it costs half as much as using it."""
    if len(take) > 1:
        return itemgetter(*take)
    return lambda xs: tuple(xs[i] for i in take)
