"""ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 3.1, Fig. 3 top).

The backward splits into B (input gradient, on the critical path) and W (weight
gradient, needed only by the optimizer). Stage ``s`` runs 1F1B's warm-up of
``p-s-1`` forwards, then F, B pairs, and defers each W by ``s`` micro-batches:
the W's fill the drain bubble. Peak memory stays 1F1B's ``p`` micro-batches
(stage ``s`` holds ``p-s`` activations and ``s`` W-deferred ones). Bubble with
equal stages, F forward, B full backward, W its weight part: ``(p-1)(F+B-2W)``
(the paper's ``(p-1)(T_F+T_B-T_W)`` with ``T_B`` the input-gradient part;
"ZB1P" in the DeepSeek-V3 report's table).
"""

from __future__ import annotations

from .base import Counted, Step


def deferred_w_order(m: int, warm: int, lag: int, f_first: bool) -> list[Step]:
    """One stage: ``warm`` forwards, then per backward one F (before the B if
    ``f_first``) and the W of the micro-batch ``lag`` backwards ago; leftover W's last."""
    steps = [Step("F", i, 0) for i in range(warm)]
    pending: list[int] = []
    f = warm
    for b in range(m):
        if f_first and f < m:
            steps.append(Step("F", f, 0))
            f += 1
        steps.append(Step("B", b, 0))
        pending.append(b)
        if not f_first and f < m:
            steps.append(Step("F", f, 0))
            f += 1
        while len(pending) > lag:
            steps.append(Step("W", pending.pop(0), 0))
    return steps + [Step("W", i, 0) for i in pending]


class ZBH1(Counted):
    name = "zb_h1"
    source = "Qi et al. 2024, Zero Bubble Pipeline Parallelism (ICLR), Sec. 3.1, Fig. 3, Table 1"
    uses_w = True

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        return [deferred_w_order(m, min(p - s - 1, m), s, True) for s in range(p)]


SCHEDULE = ZBH1()
