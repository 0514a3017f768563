"""DualPipe (DeepSeek-V3 technical report, Sec. 3.2.1; deepseek-ai/DualPipe, dualpipe.py).

Micro-batches enter from both ends: half flow stage 0 -> p-1 (direction 0,
chunk 0 here), half p-1 -> 0 (direction 1, chunk 1). Stage ``s`` therefore holds
two model pieces, stage ``s`` of one model copy and stage ``p-1-s`` of a second:
parameters (and their gradients) twice. In the steady state each step is an
F&B pair: the forward of one direction and the backward of the other run
overlapped, so one's MoE dispatch / combine all-to-all hides under the other's
compute (the engine's F&B slot). Backwards near the end are split into B and a
deferred W (zero-bubble) to fill the drain.

Per rank the order below is the repository's ``DualPipe.step`` (steps 1-8),
with its "phase" mapped to a direction (ranks in the second half swap them).
Bubble with equal stages, F forward chunk, B full backward chunk, W its weight
part, F&B an overlapped pair: ``(p/2-1)(F&B+B-3W)``; activations in flight
``p+1`` chunks on the busiest rank. Requires an even ``p`` and an even ``m >= 2p``
(the repository's assertions).
"""

from __future__ import annotations

from collections import deque

from .base import Counted, FusedStep, Step, need


class _Rank:
    """Emits one rank's steps, counting micro-batches per local phase as DualPipe does."""

    def __init__(self, direction: tuple[int, int], first_mb: tuple[int, int]):
        self.direction, self.first_mb = direction, first_mb  # per local phase
        self.f, self.b = [0, 0], [0, 0]
        self.wq: deque[Step] = deque()
        self.out: list[Step] = []

    def F(self, phase: int, fused: bool = False) -> None:
        mb = self.first_mb[phase] + self.f[phase]
        self.f[phase] += 1
        self.out.append((FusedStep if fused else Step)("F", mb, self.direction[phase]))

    def B(self, phase: int, zb: bool = False) -> None:
        mb = self.first_mb[phase] + self.b[phase]
        self.b[phase] += 1
        self.out.append(Step("B", mb, self.direction[phase]))
        if zb:  # weight gradient deferred to a later W (WeightGradStore, FIFO)
            self.wq.append(Step("W", mb, self.direction[phase]))

    def W(self) -> None:
        self.out.append(self.wq.popleft())

    def FB(self, phase0: int, phase1: int) -> None:
        self.F(phase0, fused=True)
        self.B(phase1)


def dualpipe_order(rk: _Rank, n: int, r: int, half_m: int, middle: bool) -> list[Step]:
    """The eight steps of DualPipe.step / DualPipeV.step for rank ``r`` of ``n`` (half-)ranks,
    ``half_m`` micro-batches per phase; ``middle``: the rank that does not overlap its
    first F&B (the middle ranks of DualPipe, the last rank of DualPipeV)."""
    for _ in range((n - r - 1) * 2):  # 1: nF0
        rk.F(0)
    for _ in range(r + 1):  # 2: nF0F1
        rk.F(0)
        rk.F(1)
    for _ in range(n - r - 1):  # 3: nB1W1F1
        rk.B(1, zb=True)
        rk.W()
        rk.F(1)
    for i in range(half_m - 2 * n + r + 1):  # 4: nF0B1F1B0, the steady F&B pairs
        if i == 0 and middle:
            rk.F(0)
            rk.B(1)
        else:
            rk.FB(0, 1)
        rk.FB(1, 0)
    for _ in range(n - r - 1):  # 5: nB1F1B0
        rk.B(1)
        rk.FB(1, 0)
    zb = False
    for i in range(r + 1):  # 6: nB1B0, the second half with zero bubble
        if i == (r + 1) // 2 and r % 2 == 1:
            zb = True
        rk.B(1, zb)
        if i == (r + 1) // 2 and r % 2 == 0:
            zb = True
        rk.B(0, zb)
    for _ in range(n - r - 1):  # 7: nWB0
        rk.W()
        rk.B(0, zb=True)
    for _ in range(r + 1):  # 8: nW
        rk.W()
    assert not rk.wq
    return rk.out


class DualPipe(Counted):
    name = "dualpipe"
    source = ("DeepSeek-AI 2024, DeepSeek-V3 Technical Report, Sec. 3.2.1, Table 2; "
              "github.com/deepseek-ai/DualPipe dualpipe.py")
    uses_w = True

    def chunks(self, v: int) -> int:
        return 2  # one piece of each model copy

    def place(self, p: int, v: int, stage: int, chunk: int) -> tuple[int, int]:
        return (0, stage) if chunk == 0 else (1, p - 1 - stage)

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        half, hm = p // 2, m // 2
        out = []
        for r in range(p):
            second = r >= half
            direction = (1, 0) if second else (0, 1)
            first_mb = tuple(d * hm for d in direction)
            rk = _Rank(direction, first_mb)  # type: ignore[arg-type]
            hr = min(r, p - 1 - r)
            out.append(dualpipe_order(rk, half, hr, hm, r in (half - 1, half)))
        return out

    def check(self, p: int, m: int, v: int) -> None:
        super().check(p, m, v)
        need(p % 2 == 0 and p >= 2, "parallelism.pipeline", p,
             "dualpipe needs an even pipeline size (micro-batches enter from both ends)")
        need(m % 2 == 0 and m >= 2 * p, "training.global_batch_size", f"{m} micro-batches",
             f"dualpipe needs an even micro-batch count of at least 2 * pipeline ({2 * p})")


SCHEDULE = DualPipe()
