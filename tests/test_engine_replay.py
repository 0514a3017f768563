"""The direct replay (engine/replay.py) gives the SimPy engine's results exactly.

Random phase times per (stage, chunk, micro-batch), p2p links, gradient
buckets, W splits, F&B overlap and both overlap flags, on every schedule:
step time and every per-stage statistic must be equal as floats (not
approximately), and the records equal as a multiset.
"""

from __future__ import annotations

import dataclasses

import pytest
from engine_inputs import random_input

from simulator.api import resolve, simulate_resolved
from simulator.engine import ListRecorder, NullRecorder, run_engine
from simulator.engine.core import ScheduleDeadlock
from simulator.errors import ConfigError
from simulator.schedules import SCHEDULES, Step


def _same(a, b):
    assert a.step_time == b.step_time
    assert [dataclasses.astuple(x) for x in a.stages] == [dataclasses.astuple(x)
                                                          for x in b.stages]
    assert a.events == b.events


# (pipeline, micro-batches, virtual stages) candidates; each schedule runs the first
# PER_SCHEDULE its own check accepts (dualpipe needs an even PP and 2 PP micro-batches, only
# interleaved takes VP > 1 and needs it), so every parametrization simulates a valid input.
SHAPES = [(1, 3, 1), (2, 4, 1), (4, 8, 1), (4, 6, 1), (3, 7, 1), (8, 16, 1), (4, 8, 2),
          (2, 4, 3), (2, 6, 1), (4, 12, 1), (2, 4, 2), (3, 6, 2), (4, 12, 3), (2, 8, 4),
          (6, 12, 1), (6, 18, 1), (8, 16, 2), (8, 24, 1)]
PER_SCHEDULE = 6


def _valid(name: str, p: int, m: int, v: int) -> bool:
    try:
        SCHEDULES[name].check(p, m, v)
    except ConfigError:
        return False
    return True


CASES = [(name, p, m, v) for name in sorted(SCHEDULES)
         for p, m, v in [s for s in SHAPES if _valid(name, *s)][:PER_SCHEDULE]]


def test_every_schedule_gets_its_full_share_of_valid_cases():
    for name in SCHEDULES:
        assert sum(c[0] == name for c in CASES) == PER_SCHEDULE, name


@pytest.mark.parametrize("name,p,m,v", CASES)
@pytest.mark.parametrize("overlap_grad", [True, False])
def test_direct_replay_equals_simpy(name, p, m, v, overlap_grad):
    inp = random_input(name, p, m, v, seed=p * 100 + m * 10 + v, overlap_grad=overlap_grad)
    ref = run_engine(inp, ListRecorder(), engine="simpy")
    fast = run_engine(inp, ListRecorder(), engine="direct")
    _same(ref, fast)
    assert sorted(ref.records) == sorted(fast.records)
    _same(ref, run_engine(inp, NullRecorder()))  # auto picks direct


def test_deadlock_is_reported_alike():
    inp = random_input("1f1b", 2, 2, 1, seed=1)
    bad = [[Step("B", 0, 0), Step("F", 0, 0), Step("F", 1, 0), Step("B", 1, 0)],
           inp.schedule[1]]
    inp = dataclasses.replace(inp, schedule=bad)
    messages = []
    for engine in ("simpy", "direct"):
        with pytest.raises(ScheduleDeadlock) as err:
            run_engine(inp, NullRecorder(), engine=engine)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("workload", ["llama3-8b", "gpt3-175b", "mixtral-8x7b"])
def test_shipped_plans_same_step_both_engines(workload):
    w, t = resolve(workload, "dgx-h100")
    _, plan, fast = simulate_resolved(w, t)
    ref = run_engine(plan.engine_input, NullRecorder(), engine="simpy")
    _same(ref, fast)
    _same(ref, run_engine(plan.engine_input, NullRecorder()))  # compiled structure reused
