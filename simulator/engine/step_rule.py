"""The step rule: what a step of each kind costs and hands on, written once.

Every replay of a schedule reads a step ``(phase, mb, chunk)`` the same way, and every
one calls this module for it: the SimPy loop (:mod:`.core`), the direct and the counting
replays (:mod:`.replay`, :mod:`.lean`), the fold's window check (:mod:`.windows`) and
the search's lower bound (:mod:`simulator.sweep.search_tasks`).

* **W split**: a backward ``B`` of ``(mb, chunk)`` is *split* when the stage's list also
  holds a ``W`` of that pair (:func:`split_pairs`); the step that completes a chunk's
  weight gradients, where its gradient buckets are released, is its last ``W`` or its
  last unsplit ``B`` (:func:`grad_done`; DualPipe mixes both).
* **Phase duration** (:func:`duration`, :func:`durations` for many steps at once): ``F``
  runs ``fwd``; ``W`` runs ``wgrad``; ``B`` runs ``bwd - wgrad`` when split, else
  ``bwd - 0`` (the same float64 operations either way).
* **F&B slot** (:func:`fused_slot`): an overlapped forward-backward pair (DualPipe) runs
  as one slot in which each phase's exposed EP all-to-all hides under the other's
  compute, ``df + db - hidden * (1 - slowdown)`` with ``hidden = min(ef, db - eb) +
  min(eb, df - ef)``: the hidden time still costs ``overlap_slowdown`` of itself (SMs
  taken by the communication); each phase gets the slot's share in proportion to its
  own duration (:func:`shares`). The most a pair can hide is ``ef + eb``
  (:func:`most_hidden`, the search's bound).
* **Send** (:func:`send`): a step's output to another stage leaves over the sender's
  FIFO link at ``max(producer end, link free)``, takes ``p2p`` seconds and arrives at
  ``now + (end - now)`` (SimPy's ``timeout(end - now)``); to the same stage (a V
  shape's turn) it is handed over at once.

Seconds throughout. The replays must agree float for float
(``tests/test_engine_replay.py``, ``tests/test_engine_lean.py``), so each rule is one
expression, used as is.
"""

from __future__ import annotations

import numpy as np

F, B, W = "F", "B", "W"


def split_pairs(steps) -> set[tuple[int, int]]:
    """``(mb, chunk)`` of every backward a ``W`` step splits (steps: ``(phase, mb, chunk)``)."""
    return {(x[1], x[2]) for x in steps if x[0] == W}


def is_split(step, split: set) -> bool:
    """Whether ``step`` is a backward whose weight-gradient part a ``W`` runs."""
    return step[0] == B and (step[1], step[2]) in split


def grad_done(steps, split: set) -> dict[int, int]:
    """Chunk -> index of the step that completes its weight gradients: its last ``W`` or
    unsplit ``B``."""
    out: dict[int, int] = {}
    for i, x in enumerate(steps):
        if x[0] == W or (x[0] == B and (x[1], x[2]) not in split):
            out[x[2]] = i
    return out


def duration(phase: str, fwd: float, bwd: float, wgrad: float, split: bool) -> float:
    """Seconds of one step: ``fwd`` (F), ``wgrad`` (W), ``bwd`` less ``wgrad`` if split (B)."""
    if phase == F:
        return fwd
    if phase == W:
        return wgrad
    return bwd - (wgrad if split else 0.0)


def durations(code: np.ndarray, fwd: np.ndarray, bwd: np.ndarray, wgrad: np.ndarray,
              cut: np.ndarray) -> np.ndarray:
    """:func:`duration` of many steps at once: ``code`` 0 F, 1 B, 2 W; ``cut`` split B."""
    b = bwd - np.where(cut, wgrad, 0.0)
    return np.where(code == 0, fwd, np.where(code == 2, wgrad, b))


def fused_slot(df: float, db: float, ef: float | None, eb: float | None,
               slowdown: float) -> float:
    """Seconds of an F&B pair's slot (module docs); ``ef`` None: nothing to hide."""
    if ef is None or eb is None:
        return df + db
    hidden = min(ef, db - eb) + min(eb, df - ef)
    return df + db - hidden * (1.0 - slowdown)


def shares(slot: float, durs: list[float]) -> list[float]:
    """Each phase's part of a slot, in proportion to its own duration."""
    if len(durs) == 1:
        return [durs[0]]
    total = sum(durs)
    return [slot * d / total if total > 0 else d for d in durs]


def most_hidden(ef: float, eb: float) -> float:
    """The most EP seconds one F&B pair can hide: both phases' exposed all-to-all."""
    return ef + eb


def send(now: float, link_free: float, p2p: float) -> tuple[float, float, float]:
    """``(start, end, arrival)`` of a transfer over a FIFO link."""
    start = now if now > link_free else link_free
    end = start + p2p
    return start, end, now + (end - now)
