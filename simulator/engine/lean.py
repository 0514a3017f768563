"""The counting replay: :mod:`.replay`'s recurrence with nothing but the times in its loop.

When nobody reads the records (a :class:`~.records.NullRecorder`) and no step runs as a
fused F&B pair, a stage's replay is the bare list-scheduling recurrence::

    now = max(now, arrival of the step's input) + duration                  # compute
    link = max(now, link) + p2p;  arrival of its output = now + (link - now)  # a send

Everything else :mod:`.replay` computes per step is a function of the step list and the
durations alone, or of a handful of times, so it leaves the loop:

* the record count: one per step plus one per send over a link (known from the route);
* ``busy`` (the sum of the durations) and ``warmup_fwd`` (of the forwards before the
  first backward): the same additions in the same order, after the loop;
* ``first_start``: the first step starts at ``max(0, arrival of its input)``.

What stays is the clock, the p2p wait (``max(0, now' - max(now, producer end))``, the
same expression), the link, the arrivals and the gradient-bucket releases; an input's
arrival is kept in two flat lists (its time, and its producer's end) instead of a tuple
per input. And the stages are not run as a work list: the order in which the work list
would run their steps depends on the schedule only (:mod:`.order`), so the replay is one
loop over that order, every input produced before it is read.

The durations are :mod:`.step_rule`'s (:func:`.replay._durations`), and the send its
:func:`~.step_rule.send` written out in the loop. Every float comes from the same
operations as in :mod:`.replay` (and so as in SimPy):
the results are identical, not merely close (``tests/test_engine_lean.py`` compares
every statistic on dense, MoE, interleaved and zero-bubble plans).
"""

from __future__ import annotations

from itertools import chain
from typing import Any, NamedTuple

from .order import order


class Facts(NamedTuple):
    """One stage's step list as the counting loop reads it (times excluded)."""

    wait: list[int]  # the key of the input a step waits for, -1 if none
    dst: list[int]  # the key ``k`` of the input its output becomes: ``k`` sent over the
    # link, ``-2 - k`` handed over on the same stage (the next chunk's), -1 no output
    rel: list[int]  # the chunk whose gradient buckets the step releases, -1 if none
    warm: list[int]  # the forwards before the first backward (``warmup_fwd``)
    records: int  # records the full replay would count: steps and link sends


def compile_facts(phases: list[str], wait: list, rel: list[int], dst: list) -> Facts:
    """:class:`Facts` from :func:`.replay._compile`'s per-step lists (unfused stages)."""
    first_b = phases.index("B") if "B" in phases else len(phases)
    sends = [-1 if d is None else -2 - d[2] if d[1] else d[2] for d in dst]
    return Facts([-1 if k is None else k for k in wait], sends, list(rel),
                 [i for i in range(first_b) if phases[i] == "F"],
                 len(phases) + sum(k >= 0 for k in sends))


def replay(sim: Any, facts: list[Facts], durs: list[list[float]]) -> bool:
    """Run every stage of ``sim`` to its end (as :func:`.replay.replay_all`, which hands
    over here when the records are only counted); False, ``sim`` untouched, if the
    schedule deadlocks (:mod:`.order`)."""
    p, shape = sim.p, sim.inp.fwd.shape
    size = 2 * shape[2] * shape[1] * p
    plan = order(facts, size)
    if plan is None:
        return False
    arrive = [0.0] * size  # an input's arrival (each is written before it is read)
    produced = [0.0] * size  # and its producer's end (``pp_wait``)
    clock = [0.0] * p
    links = list(sim.link_free)
    waits = [st.pp_wait for st in sim.stats]
    p2ps = [float(x) for x in sim.inp.p2p]
    release = sim.release
    flat = list(chain.from_iterable(durs))
    flat.append(0.0)
    s, now, link, pp_wait, p2p = 0, 0.0, links[0], waits[0], p2ps[0]
    for key, d, k in zip(plan.wait, plan.pick(flat), plan.dst, strict=True):
        if key >= 0:
            a = arrive[key]
            if a > now:
                # pp_wait += max(0, now' - max(now, produced)), as in .replay: nothing with
                # a <= now, and never below 0 here (an arrival is never before its
                # producer's end: ``now + (link - now)`` with ``link >= now``), so adding
                # it as is gives the same floats (a 0.0 leaves the sum as it is)
                b = produced[key]
                pp_wait += a - (now if now >= b else b)
                now = a
        elif key < -1:  # a marker (:class:`.order.Order`)
            code = -2 - key
            if code >= p:
                release(s, code - p, now, d)
                continue
            clock[s], links[s], waits[s] = now, link, pp_wait
            s = code
            now, link, pp_wait, p2p = clock[s], links[s], waits[s], p2ps[s]
            continue
        now += d
        if k >= 0:  # over the link: step_rule.send, inlined in this loop (same floats)
            produced[k] = now
            t0 = now if now > link else link
            link = t0 + p2p
            arrive[k] = now + (link - now)
        elif k < -1:  # to the next chunk on this stage: handed over at once
            k = -2 - k
            produced[k] = arrive[k] = now
    clock[s], links[s], waits[s] = now, link, pp_wait
    for s in range(p):
        _finish(sim, s, facts[s], durs[s], arrive, clock[s], links[s], waits[s])
    return True


def _finish(sim: Any, s: int, f: Facts, dur: list[float], arrive: list, now: float,
            link: float, pp_wait: float) -> None:
    """The stage's statistics, as :func:`.replay._Stage.run` leaves them."""
    st_ = sim.stats[s]
    busy, warm = st_.busy, st_.warmup_fwd
    for d in dur:
        busy += d
    for i in f.warm:
        warm += dur[i]
    if dur:
        a = arrive[f.wait[0]] if f.wait[0] >= 0 else 0.0
        st_.first_start = a if a > 0.0 else 0.0
    st_.pp_wait, st_.busy, st_.warmup_fwd, st_.pipeline_end = pp_wait, busy, warm, now
    sim.link_free[s] = link
    sim.rec.count += f.records
    sim.finished[s] = True
    if not sim.inp.overlap_grad_reduce:
        for c in range(sim.v):
            sim.release(s, c, now, 0.0)
