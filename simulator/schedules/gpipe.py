"""GPipe (Huang et al. 2019): all forwards, then all backwards.

Bubble fraction with equal stages: ``(p-1)/(m+p-1)``; every stage holds the
activations of all ``m`` micro-batches at its peak.
"""

from __future__ import annotations

from .base import Schedule, Step


class GPipe(Schedule):
    name = "gpipe"
    source = "Huang et al. 2019, GPipe, Fig. 2"

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        order = [Step("F", i, 0) for i in range(m)] + [Step("B", i, 0) for i in range(m)]
        return [list(order) for _ in range(p)]

    def in_flight(self, p: int, m: int, v: int, stage: int) -> float:
        return float(m)

    def outputs_held(self, p: int, m: int, v: int) -> int:
        return m


SCHEDULE = GPipe()
