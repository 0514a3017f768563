"""The schedule interface, the one send rule, the recorder, the plan's shape."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.api import resolve, simulate_resolved
from simulator.engine import EngineInput, ListRecorder, NullRecorder, ScheduleDeadlock, run_engine
from simulator.schedules import SCHEDULES, Schedule, Step
from simulator.shape.plan_shape import plan_shape


def _inp(name, p, m, v=1):
    sched = SCHEDULES[name]
    n = sched.chunks(v)
    return EngineInput(sched.steps(p, m, v), np.ones((p, n, m)), np.full((p, n, m), 2.0),
                       np.full(p, 0.1), [[[] for _ in range(n)] for _ in range(p)],
                       np.zeros(p), np.zeros(p), route=sched.route(p, v))


def test_registry_is_collected_from_the_package():
    assert {"gpipe", "1f1b", "interleaved"} <= set(SCHEDULES)
    assert all(isinstance(s, Schedule) and s.source for s in SCHEDULES.values())


@pytest.mark.parametrize("name,p,m,v", [("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2)])
def test_send_records_carry_the_routes_destination(name, p, m, v):
    run = run_engine(_inp(name, p, m, v))
    route = SCHEDULES[name].route(p, v)
    sends = [r for r in run.records if r.stream == "pp"]
    assert sends
    for r in sends:
        copy, g = route.place[(r.stage, r.chunk)]
        step_g = g + (1 if r.name == "send_F" else -1)
        assert route.place[(r.dst_stage, r.dst_chunk)] == (copy, step_g)
    # Megatron interleaving: stage p-1's chunk c feeds stage 0's chunk c+1
    if v > 1:
        wrap = [r for r in sends if r.stage == p - 1 and r.name == "send_F"]
        assert {(r.dst_stage, r.dst_chunk - r.chunk) for r in wrap} == {(0, 1)}


def test_null_recorder_keeps_nothing_and_counts_the_same():
    kept = run_engine(_inp("1f1b", 4, 8), ListRecorder())
    dropped = run_engine(_inp("1f1b", 4, 8), NullRecorder())
    assert dropped.records == [] and dropped.events == kept.events == len(kept.records)
    assert dropped.step_time == kept.step_time


def test_plain_simulate_keeps_no_records():
    w, t = resolve("tiny", "dgx-h100")
    plain, _, run = simulate_resolved(w, t)
    full, _, run_kept = simulate_resolved(w, t, keep_records=True)
    assert run.records == [] and run_kept.records
    assert plain.step_time_s == full.step_time_s and run.events == run_kept.events


def test_shape_is_the_one_home_of_the_layer_split():
    w, _ = resolve("llama3-70b", "dgx-h100")  # interleaved p=4, v=5
    shape = plan_shape(w)
    ids = [i for s in range(shape.stages) for c in range(shape.chunks)
           for i in shape.layer_ids(s, c)]
    assert sorted(ids) == list(range(w.model.num_layers))
    assert shape.layer_ids(1, 1)[0] == shape.partition.counts[0] * 5  # global chunk 1*4+1
    assert shape.first(0, 0) and shape.last(3, 4) and not shape.last(3, 3)
    assert shape.local_seq == w.model.seq_length / w.parallelism.context


def test_an_order_that_deadlocks_is_reported_not_replayed():
    inp = _inp("1f1b", 2, 4)
    # stage 0 as 1F1B with no warm-up: it waits for B0 before sending F1, which stage 1
    # (GPipe order) needs before its first backward
    inp.schedule = [[Step("F", 0, 0), Step("B", 0, 0)] + [Step(ph, i, 0) for i in (1, 2, 3)
                                                            for ph in "FB"],
                    [Step("F", i, 0) for i in range(4)] + [Step("B", i, 0) for i in range(4)]]
    with pytest.raises(ScheduleDeadlock, match="stage 0 waits for"):
        run_engine(inp)
