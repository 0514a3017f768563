"""The counting replay (engine/lean.py over engine/order.py) gives the full replay's results.

Times that differ per micro-batch (as MoE router draws make them), on every schedule, and
shipped MoE and dense plans (interleaved, 1F1B, zero-bubble, GPipe): the counting replay
must give the step time and every per-stage statistic equal as floats to the replay that
keeps its records (engine/replay.py, itself equal to SimPy: tests/test_engine_replay.py),
and count as many records. Fused F&B pairs (DualPipe) and deadlocks are left to
engine/replay.py. Also: the plan's MoE sums per chunk (workload/moe_plan.py) and its
chunks costed once per kind (workload/chunk_cost.py ``collect``) against their references.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from engine_inputs import random_input

from simulator.api import resolve
from simulator.engine import (
    ListRecorder,
    NullRecorder,
    core,
    lean,
    order,
    replay,
    run_engine,
)
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.schedules import SCHEDULES, Step
from simulator.workload.chunk_cost import ChunkCoster
from simulator.workload.moe import plan as moe_plan
from simulator.workload.plan import build_plan


@pytest.fixture
def spy(monkeypatch):
    """Which replays the counting path ran to the end (True) or handed back (False)."""
    calls: list[bool] = []
    real = lean.replay

    def watched(sim, facts, durs):
        calls.append(real(sim, facts, durs))
        return calls[-1]

    monkeypatch.setattr(lean, "replay", watched)
    return calls


def _same(ref, got):
    assert got.step_time == ref.step_time
    assert [dataclasses.astuple(x) for x in got.stages] == [dataclasses.astuple(x)
                                                            for x in ref.stages]
    assert got.events == ref.events


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("p,m,v,overlap_grad", [(4, 8, 1, True), (3, 12, 2, False),
                                                (8, 16, 1, True), (2, 6, 3, True)])
def test_counting_replay_equals_full_replay(spy, name, p, m, v, overlap_grad):
    try:
        inp = random_input(name, p, m, v, seed=p * 1000 + m * 10 + v, overlap_grad=overlap_grad)
    except ConfigError:
        return
    ref = run_engine(inp, ListRecorder(), engine="direct")
    _same(ref, run_engine(inp, NullRecorder()))
    _same(ref, run_engine(inp, NullRecorder()))  # the order remembered
    fused = any(type(x) is not Step for steps in inp.schedule for x in steps)
    assert spy == ([] if fused else [True, True])


PLANS = [("deepseek-v3", {}),
         ("deepseek-v3", {"training.global_batch_size": 1024,
                          "parallelism.pipeline_schedule": "1f1b",
                          "parallelism.virtual_pipeline": None,
                          "parallelism.pipeline_model_parallel_layout": None}),
         ("mixtral-8x7b", {}),
         ("mixtral-8x7b", {"parallelism.pipeline_schedule": "zb_h1"}),
         ("mixtral-8x22b", {"parallelism.pipeline_schedule": "gpipe"}),
         ("llama3-70b", {}),
         ("gpt3-175b", {"parallelism.pipeline_schedule": "zb_v",
                        "parallelism.virtual_pipeline": None})]


@pytest.mark.parametrize("workload,overrides", PLANS)
def test_shipped_plans_counting_replay_equals_full_replay(spy, workload, overrides):
    w, t = resolve(workload, "dgx-h100", overrides or None)
    inp = build_plan(w, Topology.from_config(t), ops=False).engine_input
    _same(run_engine(inp, ListRecorder(), engine="direct"),
          run_engine(inp, NullRecorder(), engine="direct"))
    assert spy == [True]


def test_deadlock_has_no_order_and_is_left_to_the_full_replay(spy):
    inp = random_input("1f1b", 2, 2, 1, seed=1)
    bad = ((Step("B", 0, 0), Step("F", 0, 0), Step("F", 1, 0), Step("B", 1, 0)),
           inp.schedule[1])
    with pytest.raises(Exception, match="deadlocks"):
        run_engine(dataclasses.replace(inp, schedule=bad), NullRecorder())
    assert spy == [False]


def test_order_runs_every_step_once_after_its_input():
    inp = random_input("interleaved", 4, 8, 2, seed=3)
    sim = core._Sim(inp, NullRecorder())
    facts = [replay._Stage(sim, s).facts for s in range(sim.p)]
    plan = order.order(facts, 2 * 8 * 4 * 4)
    made, stage = set(), None
    for key, k in zip(plan.wait, plan.dst, strict=True):
        if key < -1:  # a marker: switch stage, or release buckets (code >= 4)
            stage = -2 - key if -2 - key < 4 else stage
            continue
        assert stage is not None and (key == -1 or key in made)
        if k != -1:
            made.add(k if k >= 0 else -2 - k)
    total = sum(map(len, inp.schedule))
    assert set(plan.take) == set(range(total + 1))  # every step, and the 0.0 after them
    assert len(plan.take) - plan.take.count(total) == total + sum(r >= 0 for f in facts
                                                                 for r in f.rel)


def _pending(w, t):
    """The plan's MoE chunks (collect mode), as build_plan hands them to add_moe_parts."""
    bld = ChunkCoster(w, Topology.from_config(t))
    shape, out = bld.shape, []
    for s in range(w.parallelism.pipeline):
        for c in range(shape.chunks):
            first, last = shape.first(s, c), shape.last(s, c)
            layers: list = []
            f, b, wg = bld.chunk(s, c, 0, first, last, ops=False, moe_layers=layers)
            out.append((bld.collect(s, c, 0, first, last), (f, b, wg, layers)))
    return bld, out


@pytest.mark.parametrize("workload,overrides", [
    ("deepseek-v3", {}), ("mixtral-8x7b", {"parallelism.pipeline": 1,
                                           "parallelism.virtual_pipeline": None}),
    ("mixtral-8x7b", {"parallelism.pipeline": 1, "parallelism.virtual_pipeline": None,
                      "training.global_batch_size": 8})])
def test_chunk_sums_and_collect_equal_their_references(workload, overrides):
    w, t = resolve(workload, "dgx-h100", overrides or None)
    bld, pairs = _pending(w, t)
    for (f, b, wg, layers), (f0, b0, wg0, layers0) in pairs:
        assert (f.duration, f.compute, f.exposed, b.duration, b.compute, b.exposed, wg) == \
            (f0.duration, f0.compute, f0.exposed, b0.duration, b0.compute, b0.exposed, wg0)
        assert layers == layers0
    chunks = [moe_plan.ChunkBase(0, i, [0], f, b, wg, layers)
              for i, ((f, b, wg, layers), _) in enumerate(pairs)]
    moe = bld.moe
    per_draw = np.concatenate([moe.stacked(False)[moe_plan._PHASE_FIELDS],
                               moe.stacked(True)[moe_plan._PHASE_FIELDS],
                               moe.stacked("redo")[moe_plan._PHASE_FIELDS]])
    rows = [[moe.table.layer_row[x[0]] for x in ch.layers] for ch in chunks]
    ref = moe_plan._chunk_sums_rows(per_draw, moe.table.entry, chunks, rows)
    got = moe_plan.chunk_sums(moe, chunks)
    assert max(map(len, rows)) >= 2
    for a, b in zip(got, ref, strict=True):
        assert np.array_equal(a, b)
