"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 6, Fig. 8).

Two chunks per stage in a V: stage ``s`` holds global chunk ``s`` (chunk 0, on
the way down) and ``2p-1-s`` (chunk 1, on the way up), so stage 0 holds both
the embedding and the loss and the turn at stage ``p-1`` is local; the backward
is split into B and W, and W's fill the warm-up and drain.

The order: the V-shape zero-bubble order that the ZB authors (Sea AI Lab)
published as the "cut-in-half" of DualPipe (deepseek-ai/DualPipe,
``dualpipev.py``, steps nF0 / nF0F1 / nB1W1F1 / nF0B1F1B0 / nB1F1B0 / nB1B0 /
nWB0 / nW), run as plain steps, without DualPipe's F&B overlap. We tried the
paper's alternative, greedy list scheduling under equal F, B, W times: it is
as good at equal times but an order fixed for equal times degrades badly when
B and W differ (3x the bubble at ``T_B = 1.5 T_F``), this one does not.
Peak memory ``2p+1`` chunk activations, ``p + 1/2`` stage micro-batches (the
paper's ZB-V keeps ``p``, 1F1B's peak). Requires ``m >= 2p``.
"""

from __future__ import annotations

from .base import Step
from .dualpipe_v import DualPipeV


class ZBV(DualPipeV):
    """DualPipeV's placement, rules and order, with every F&B pair run as two plain steps."""

    name = "zb_v"
    source = ("Qi et al. 2024, Zero Bubble Pipeline Parallelism (ICLR), Sec. 6; order from "
              "github.com/deepseek-ai/DualPipe dualpipev.py without F&B overlap")

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        return [[Step(*x) for x in stage] for stage in super().steps(p, m, v)]


SCHEDULE = ZBV()
