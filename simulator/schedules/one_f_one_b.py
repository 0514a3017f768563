"""1F1B (PipeDream-Flush; Narayanan et al. 2021).

Stage ``s`` runs ``p-s-1`` warm-up forwards, then alternates one forward and
one backward, then drains. Same bubble as GPipe, ``(p-1)/(m+p-1)``, but at
most ``p-s`` micro-batches in flight on stage ``s``.
"""

from __future__ import annotations

from .base import Schedule, Step


def one_f_one_b_order(p: int, m: int, s: int) -> list[Step]:
    """Stage ``s``'s 1F1B order (one chunk)."""
    warm = min(p - s - 1, m)
    steps = [Step("F", i, 0) for i in range(warm)]
    f, b = warm, 0
    while f < m:
        steps.append(Step("F", f, 0))
        f += 1
        steps.append(Step("B", b, 0))
        b += 1
    steps += [Step("B", i, 0) for i in range(b, m)]
    return steps


class OneFOneB(Schedule):
    name = "1f1b"
    source = "Narayanan et al. 2021, Efficient Large-Scale Language Model Training, Fig. 3"

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        return [one_f_one_b_order(p, m, s) for s in range(p)]


SCHEDULE = OneFOneB()
