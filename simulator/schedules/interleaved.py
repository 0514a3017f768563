"""Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2), with Megatron-Core's group size.

Each stage holds ``v`` model chunks, chunk ``c`` of stage ``s`` being global
chunk ``c*p + s``; the bubble shrinks by ``v`` to ``(p-1)/(v*m+p-1)`` of the
pipeline time. Each virtual stage runs ``N`` micro-batches in a row
(``parallelism.microbatch_group_size_per_vp_stage``, Megatron-Core's
``--microbatch-group-size-per-virtual-pipeline-stage``; default ``N = p``, the
depth-first order of the paper): the k-th forward is micro-batch
``g*N + i`` of chunk ``c`` for ``k = g*N*v + c*N + i``, the last group holding the
remaining micro-batches (Megatron-Core ``get_schedule_table``); the backward visits
the chunks in reverse. Megatron warms up ``2*(p-s-1) + (v-1)*N``
chunk-micro-batches plus the one in flight, each ``1/v`` of a stage, so with
``N = p`` stage 0 holds ``p*(1 + (p-1)/(p*v))`` stage micro-batches (Korthikanti
2022, Sec. 4.2.3); a larger ``N`` holds more and hides more of the sends. Rules
(Megatron-Core ``forward_backward_pipelining_with_interleaving``): ``p <= N <= m``,
and ``m % N`` is 0 or at least ``p``; with the default that is ``m % p == 0``.
Source: Megatron-LM ``megatron/core/pipeline_parallel/schedules.py`` at commit
d98e8a64 (``get_pp_rank_microbatches``, ``get_schedule_table``).
"""

from __future__ import annotations

from .base import Schedule, Step, need


def schedule_table(m: int, v: int, n: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch in forward order, ``n`` per group."""
    table = []
    for first in range(0, m, n):
        last = m if first + n >= m else first + n
        table += [(mb, c) for c in range(v) for mb in range(first, last)]
    return table


class Interleaved(Schedule):
    name = "interleaved"
    source = "Narayanan et al. 2021, Sec. 2.2, Fig. 4"
    virtual = True

    def __init__(self, group: int | None = None):
        self.group = group  # micro-batches per virtual stage in a row; None: p

    def _n(self, p: int) -> int:
        return self.group or p

    def grouped(self, n: int) -> Interleaved:
        """This schedule with ``n`` micro-batches in a row per virtual stage (one instance
        per ``n``, so caches keyed by the schedule see the same object)."""
        return _GROUPED.setdefault(n, Interleaved(n))

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        total = m * v
        # the k-th forward / backward is the same (micro-batch, chunk) on every stage:
        # map once, then each stage is warm-up forwards, F/B pairs, drain backwards
        table = schedule_table(m, v, self._n(p))
        fwd = [Step("F", mb, c) for mb, c in table]
        bwd = [Step("B", mb, v - 1 - c) for mb, c in table]
        out = []
        for s in range(p):
            warm = min((p - s - 1) * 2 + (v - 1) * self._n(p), total)
            steps = fwd[:warm]
            for pair in zip(fwd[warm:], bwd, strict=False):  # one F, one B
                steps.extend(pair)
            steps += bwd[total - warm:]
            out.append(steps)
        return out

    def time_steps(self, p: int, m: int, v: int) -> list[list[int]] | None:
        """Slots of PyTorch's ``ScheduleInterleaved1F1B`` (``torch/distributed/pipelining/
        schedules.py`` at v2.8.0 and v2.9.0, ``_calculate_single_rank_operations`` and
        ``_get_1f1b_rank_ops``), whose per-rank order is this one with ``N`` micro-batches a
        round (PyTorch: ``m // max(1, m // p)``, which is ``p`` when ``p`` divides ``m``).
        Rank ``s`` idles ``s`` slots, runs its warm-up forwards one a slot, idles until slot
        ``v*p + 2*(p-1-s)`` (if it has not reached it), then runs a forward and a backward
        each pair of slots and, in the cool-down, an empty slot before each backward. None
        unless ``N`` is PyTorch's."""
        n = self._n(p)
        if n != m // max(1, m // p):
            return None
        out = []
        for s, steps in enumerate(self.steps(p, m, v)):
            warm = min((v - 1) * n + 2 * (p - 1 - s), m * v)
            pairs = m * v - warm
            # PyTorch pads to this slot; a warm-up longer than it (N > p) pads nothing
            first_pair = max(v * p + 2 * (p - 1 - s), s + warm)
            slots = [s + k for k in range(warm)]
            for j in range(pairs):
                slots += [first_pair + 2 * j, first_pair + 2 * j + 1]
            cool = first_pair + 2 * pairs
            slots += [cool + 2 * j + 1 for j in range(warm)]
            assert len(slots) == len(steps)
            out.append(slots)
        return out

    def in_flight(self, p: int, m: int, v: int, stage: int) -> float:
        chunks = 2 * (p - stage - 1) + (v - 1) * self._n(p) + 1
        return min(chunks, m * v) / v

    def p2p_buffers(self) -> int:
        return 2  # a forward's and a backward's transfers overlap

    def check(self, p: int, m: int, v: int) -> None:
        super().check(p, m, v)
        if self.group is None:
            need(m % p == 0, "training.global_batch_size", f"{m} micro-batches",
                 f"interleaved schedule needs the micro-batch count ({m}) to be a multiple "
                 f"of pipeline ({p})")
            return
        n = self.group
        need(p <= n <= m, "parallelism.microbatch_group_size_per_vp_stage", n,
             f"between pipeline ({p}) and the micro-batch count ({m}) (Megatron-Core's rule)")
        need(m % n == 0 or m % n >= p, "parallelism.microbatch_group_size_per_vp_stage", n,
             f"a divisor of the micro-batch count ({m}), or leaving a last group of at "
             f"least pipeline ({p}) micro-batches (now {m % n}; Megatron-Core's rule)")


_GROUPED: dict[int, Interleaved] = {}
SCHEDULE = Interleaved()
