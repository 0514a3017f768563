"""DualPipeV (deepseek-ai/DualPipe, dualpipev.py; Sea AI Lab's "cut-in-half" of DualPipe).

DualPipe cut in half: ``p`` ranks hold ``2p`` stages of one model copy in a V
(rank ``r`` holds stage ``r`` as chunk 0 and stage ``2p-1-r`` as chunk 1), all
micro-batches enter at rank 0, turn at rank ``p-1`` and the loss is on rank 0.
One copy of the parameters (two chunks of ``L/2p`` layers per rank: the same
per-rank share as 1F1B on ``p`` ranks). Same eight-step order as DualPipe with
F&B pairs in the steady state. Bubble ``(P/2-1)(F&B+B-3W)`` with ``P = 2p``
stages (the repository's table), activations ``P+1`` chunks in flight on the
busiest rank. Requires ``m >= 2p``.
"""

from __future__ import annotations

from .base import Counted, Step, need
from .dualpipe import _Rank, dualpipe_order


class DualPipeV(Counted):
    name = "dualpipe_v"
    source = "github.com/deepseek-ai/DualPipe dualpipev.py and README table"
    uses_w = True

    def chunks(self, v: int) -> int:
        return 2

    def place(self, p: int, v: int, stage: int, chunk: int) -> tuple[int, int]:
        return 0, (stage if chunk == 0 else 2 * p - 1 - stage)

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        return [dualpipe_order(_Rank((0, 1), (0, 0)), p, r, m, r == p - 1) for r in range(p)]

    def check(self, p: int, m: int, v: int) -> None:
        super().check(p, m, v)
        need(m >= 2 * p, "training.global_batch_size", f"{m} micro-batches",
             f"{self.name} needs at least 2 * pipeline ({2 * p}) micro-batches")


SCHEDULE = DualPipeV()
