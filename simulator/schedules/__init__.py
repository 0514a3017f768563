"""Pipeline schedules: the order in which each stage runs its forward and backward phases.

A schedule is, per stage, a list of :class:`Step` ``(phase, microbatch, chunk)``.
The engine adds the data dependencies (a forward needs the previous stage's
activation, a backward the next stage's gradient), so a schedule only says
*order*, never timing.

* GPipe (Huang et al. 2019): all forwards, then all backwards.
  Bubble fraction with equal stages: (p-1)/(m+p-1).
* 1F1B (PipeDream-Flush; Narayanan et al. 2021): stage s runs ``p-s-1``
  warm-up forwards, then alternates one forward and one backward, then drains.
  Same bubble as GPipe, but at most ``p-s`` micro-batches in flight.
* Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2): each stage holds ``v``
  model chunks; the bubble shrinks by ``v`` to (p-1)/(v*m+p-1) of the pipeline time.
  Requires ``m % p == 0`` (Megatron-LM's rule).

Extension point: a new schedule is a function ``(p, m, v) -> list[list[Step]]``
registered in :data:`SCHEDULES`; it must list every (phase, microbatch, chunk)
exactly once per stage, with each forward before its backward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class Step(NamedTuple):
    phase: str  # "F" | "B"
    mb: int
    chunk: int


def gpipe(p: int, m: int, v: int = 1) -> list[list[Step]]:
    order = [Step("F", i, 0) for i in range(m)] + [Step("B", i, 0) for i in range(m)]
    return [list(order) for _ in range(p)]


def one_f_one_b(p: int, m: int, v: int = 1) -> list[list[Step]]:
    out = []
    for s in range(p):
        warm = min(p - s - 1, m)
        steps = [Step("F", i, 0) for i in range(warm)]
        f, b = warm, 0
        while f < m:
            steps.append(Step("F", f, 0))
            f += 1
            steps.append(Step("B", b, 0))
            b += 1
        steps += [Step("B", i, 0) for i in range(b, m)]
        out.append(steps)
    return out


def _virtual(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """Megatron's map from the k-th virtual micro-batch to (microbatch, chunk)."""
    group, pos = divmod(k, p * v)
    chunk = pos // p
    if not forward:
        chunk = v - 1 - chunk
    return group * p + pos % p, chunk


def interleaved(p: int, m: int, v: int) -> list[list[Step]]:
    total = m * v
    out = []
    for s in range(p):
        warm = min((p - s - 1) * 2 + (v - 1) * p, total)
        steps = [Step("F", *_virtual(k, p, v, True)) for k in range(warm)]
        f, b = warm, 0
        while f < total:
            steps.append(Step("F", *_virtual(f, p, v, True)))
            f += 1
            steps.append(Step("B", *_virtual(b, p, v, False)))
            b += 1
        steps += [Step("B", *_virtual(k, p, v, False)) for k in range(b, total)]
        out.append(steps)
    return out


SCHEDULES: dict[str, Callable[[int, int, int], list[list[Step]]]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved,
}


def build_schedule(name: str, p: int, m: int, v: int = 1) -> list[list[Step]]:
    return SCHEDULES[name](p, m, v)


def bubble_closed_form(p: int, m: int, v: int = 1) -> float:
    """Idle fraction of the pipeline time with equal stages and free communication.

    ``(p-1) / (v*m + p-1)``: the bubble of (p-1) stage-times shrunk by v
    (Narayanan et al. 2021, Eq. 1 and Sec. 2.2.1).
    """
    return (p - 1) / (v * m + p - 1)
