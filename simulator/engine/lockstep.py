"""Lock-step replay: PyTorch's ``PipelineScheduleMulti`` runtime (stacks/*.yaml
``pipeline.lockstep``).

Megatron-Core posts a pipeline receive ahead of the phase that needs it and waits for it
there (:mod:`.replay`: a step starts at ``max(previous end, input arrival)``). PyTorch's
multi-stage runtime up to v2.9 does not (``torch/distributed/pipelining/schedules.py``,
``PipelineScheduleMulti._step_microbatches`` at v2.8.0 and v2.9.0; ``ScheduleInterleaved1F1B``
derives from it until v2.10.0 moves it to ``_PipelineScheduleRuntime``). Every rank walks
the same table of time slots (``pipeline_order``, :meth:`Schedule.time_steps
<simulator.schedules.base.Schedule.time_steps>`); in slot ``t`` it runs its compute
action, if any, then batches the send of that action's output with the receives of what
its neighbours computed in slot ``t`` (``batch_isend_irecv``) and waits for the whole batch
(``_wait_batch_p2p``: ``work.wait()``, which holds the compute stream) before slot ``t+1``.
A transfer needs both ends in the batch, so a rank's next slot starts only when every
neighbour it exchanges with in slot ``t`` has finished its own slot-``t`` compute, plus the
transfer: the pipeline advances at the pace of the slowest of each pair of neighbours in
every slot, not only where data is missing.

Modelled per slot, in slot order: a stage's action starts at its clock (every input it
needs arrived in an earlier slot's batch, which the clock already waited for) and ends
``duration`` later; each send pairs its stage with the consumer's stage, and both clocks
move to ``max(their slot-t ends) + p2p`` of the sender (a stage with several transfers
takes the latest); a stage with none keeps its compute end. ``pp_wait`` counts the
transfer seconds; waiting for a slower neighbour is pipeline idle time (the bubble). Never
shorter than the asynchronous replay of the same order; longer even with equal phases where
a slot pairs a busy rank with one that could have run ahead (two stages, two chunks, two
micro-batches, forward 1 s and backward 2 s: 16 s against 15 s, worked by hand in
``tests/test_lockstep.py``). Fused F&B steps are not part of any PyTorch schedule modelled
here. Seconds.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from . import step_rule as rule
from .records import NullRecorder, Record


def replay(sim: Any) -> None:
    """Run every stage of ``sim`` (a :class:`~.core._Sim` whose input has ``lockstep``
    slots) slot by slot; fills ``sim.stats``, ``sim.dp_jobs``, ``sim.finished`` and the
    recorder as :mod:`.replay` does."""
    inp, p, rec = sim.inp, sim.p, sim.rec
    count_only = isinstance(rec, NullRecorder)  # records counted, not built
    slots: dict[int, list[tuple[int, int]]] = {}
    facts = []  # per stage and step: (step, seconds, its input's key or None, its consumer)
    grad_done = []  # per stage: chunk -> index of the step that completes its gradients
    for s in range(p):
        steps, table = inp.schedule[s], inp.lockstep[s]
        if len(table) != len(steps) or any(b <= a for a, b in pairwise(table)):
            raise ValueError(f"stage {s}: lockstep needs one increasing slot per step")
        for i, t in enumerate(table):
            slots.setdefault(t, []).append((s, i))
        split = rule.split_pairs(steps)
        grad_done.append(rule.grad_done(steps, split))
        facts.append([(x, sim.duration(s, x, split),
                       (x.phase, x.mb, x.chunk, s) if sim.route.waits(s, x) else None,
                       sim.route.dst(s, x)) for x in steps])
    p2p = [float(x) for x in inp.p2p]
    clock = [0.0] * p
    seen_b = [False] * p
    arrived: set[tuple] = set()
    for t in sorted(slots):
        end = list(clock)
        sends = []
        for s, i in slots[t]:
            x, d, need, dst = facts[s][i]
            st_ = sim.stats[s]
            if need is not None and need not in arrived:
                raise ValueError(f"stage {s} runs {x} in slot {t} before its input arrived")
            start = clock[s]
            if st_.first_start < 0:
                st_.first_start = start
            if grad_done[s].get(x.chunk) == i and inp.overlap_grad_reduce:
                sim.release(s, x.chunk, start, d)
            end[s] = start + d
            if count_only:
                rec.count += 1
            else:
                rec.add(Record(s, "compute", x.phase, start, end[s], x.mb, x.chunk))
            st_.busy += d
            if x.phase == "F" and not seen_b[s]:
                st_.warmup_fwd += d
            seen_b[s] = seen_b[s] or x.phase == "B"
            if dst is not None:
                sends.append((s, x, dst))
        after = list(end)
        for s, x, (q, c) in sends:
            arrived.add((x.phase, x.mb, c, q))
            if q == s:
                continue
            t0 = max(end[s], end[q])
            t1 = t0 + p2p[s]
            if count_only:
                rec.count += 1
            else:
                rec.add(Record(s, "pp", "send_" + x.phase, t0, t1, x.mb, x.chunk,
                               inp.p2p_bytes, q, c))
            for r in (s, q):
                if t1 > after[r]:
                    sim.stats[r].pp_wait += t1 - max(t0, after[r])
                    after[r] = t1
        clock = after
    for s in range(p):
        sim.stats[s].pipeline_end = clock[s]
        sim.finished[s] = True
        if not inp.overlap_grad_reduce:
            for c in range(sim.v):
                sim.release(s, c, clock[s], 0.0)
