"""ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 3.1, Fig. 3 bottom).

More memory for no bubble: stage ``s`` warms up with ``2(p-s-1)+1`` forwards,
enough to stay busy until its first gradient arrives, then runs B, F and
defers each W by ``2s`` micro-batches, so the W's fill the drain. Peak memory
``2p-1`` micro-batches (the paper's ``(2p-1) M_B``). The near-zero bubble
``(p-1)(F+B-3W)`` in the full-backward notation (the paper's
``(p-1)(T_F+T_B-2T_W)``, zero when ``T_F = T_B = T_W``) holds with the paper's
post-validation (Sec. 4): no global synchronisation before the optimizer
step, so a stage starts its next step when it is done and the step period is
the longest stage's own span. ``post_validation`` says so to the engine.
"""

from __future__ import annotations

from .base import Counted, Step
from .zb_h1 import deferred_w_order


class ZBH2(Counted):
    name = "zb_h2"
    source = "Qi et al. 2024, Zero Bubble Pipeline Parallelism (ICLR), Sec. 3.1 and 4, Table 1"
    uses_w = True
    post_validation = True

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        return [deferred_w_order(m, min(2 * (p - s - 1) + 1, m), 2 * s, False)
                for s in range(p)]


SCHEDULE = ZBH2()
