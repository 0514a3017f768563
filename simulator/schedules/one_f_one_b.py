"""1F1B (PipeDream-Flush; Narayanan et al. 2021).

Stage ``s`` runs ``p-s-1`` warm-up forwards, then alternates one forward and
one backward, then drains. Same bubble as GPipe, ``(p-1)/(m+p-1)``, but at
most ``p-s`` micro-batches in flight on stage ``s``.
"""

from __future__ import annotations

from .base import Schedule, Step


def one_f_one_b_order(p: int, m: int, s: int, fwd: list[Step] | None = None,
                      bwd: list[Step] | None = None) -> list[Step]:
    """Stage ``s``'s 1F1B order (one chunk). ``fwd`` / ``bwd``: the m forward / backward
    steps in order, if already built (shared by every stage)."""
    fwd = fwd if fwd is not None else [Step("F", i, 0) for i in range(m)]
    bwd = bwd if bwd is not None else [Step("B", i, 0) for i in range(m)]
    warm = min(p - s - 1, m)
    steps = fwd[:warm]
    for pair in zip(fwd[warm:], bwd, strict=False):  # one F, one B
        steps.extend(pair)
    steps += bwd[m - warm:]
    return steps


class OneFOneB(Schedule):
    name = "1f1b"
    source = "Narayanan et al. 2021, Efficient Large-Scale Language Model Training, Fig. 3"

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        fwd, bwd = [Step("F", i, 0) for i in range(m)], [Step("B", i, 0) for i in range(m)]
        return [one_f_one_b_order(p, m, s, fwd, bwd) for s in range(p)]


SCHEDULE = OneFOneB()
