"""Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2).

Each stage holds ``v`` model chunks, chunk ``c`` of stage ``s`` being global
chunk ``c*p + s``; the bubble shrinks by ``v`` to ``(p-1)/(v*m+p-1)`` of the
pipeline time. Megatron warms up ``2*(p-s-1) + (v-1)*p`` chunk-micro-batches
plus the one in flight, each ``1/v`` of a stage, so stage 0 holds
``p*(1 + (p-1)/(p*v))`` stage micro-batches (Korthikanti 2022, Sec. 4.2.3).
Requires ``m % p == 0`` (Megatron-LM's rule).
"""

from __future__ import annotations

from .base import Schedule, Step, need


def _virtual(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """Megatron's map from the k-th virtual micro-batch to (microbatch, chunk)."""
    group, pos = divmod(k, p * v)
    chunk = pos // p
    if not forward:
        chunk = v - 1 - chunk
    return group * p + pos % p, chunk


class Interleaved(Schedule):
    name = "interleaved"
    source = "Narayanan et al. 2021, Sec. 2.2, Fig. 4"
    virtual = True

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        total = m * v
        # the k-th forward / backward is the same (micro-batch, chunk) on every stage:
        # map once, then each stage is warm-up forwards, F/B pairs, drain backwards
        fwd = [Step("F", *_virtual(k, p, v, True)) for k in range(total)]
        bwd = [Step("B", *_virtual(k, p, v, False)) for k in range(total)]
        out = []
        for s in range(p):
            warm = min((p - s - 1) * 2 + (v - 1) * p, total)
            steps = fwd[:warm]
            for pair in zip(fwd[warm:], bwd, strict=False):  # one F, one B
                steps.extend(pair)
            steps += bwd[total - warm:]
            out.append(steps)
        return out

    def in_flight(self, p: int, m: int, v: int, stage: int) -> float:
        chunks = 2 * (p - stage - 1) + (v - 1) * p + 1
        return min(chunks, m * v) / v

    def check(self, p: int, m: int, v: int) -> None:
        super().check(p, m, v)
        need(m % p == 0, "training.global_batch_size", f"{m} micro-batches",
             f"interleaved schedule needs the micro-batch count ({m}) to be a multiple "
             f"of pipeline ({p})")


SCHEDULE = Interleaved()
