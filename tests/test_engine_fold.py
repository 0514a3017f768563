"""The long-pipeline fold (engine/periodic.py) gives the full direct replay's results.

Every schedule, long enough to fold, with times that differ per stage and chunk but not
per micro-batch (random, so that the steady state of some repeats only every 2-4
windows): the folded step must equal the full replay's to float rounding (1e-12 of
the step time) in every per-stage statistic, and count the same records. The full
replay itself equals SimPy (tests/test_engine_replay.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.api import resolve, simulate_resolved
from simulator.engine import EngineInput, ListRecorder, NullRecorder, core, periodic, run_engine
from simulator.engine.core import _Sim
from simulator.engine.replay import replay_all
from simulator.schedules import SCHEDULES, Step
from simulator.validation.cases import load_cases

LONG = {"1f1b": (5, 96, 1), "interleaved": (3, 120, 2), "zb_h1": (4, 96, 1),
        "zb_h2": (5, 96, 1), "zb_v": (4, 128, 1), "dualpipe": (4, 128, 1),
        "dualpipe_v": (4, 128, 1), "gpipe": (4, 96, 1)}
NO_FOLD = {"gpipe"}  # two periodic runs (all F, then all B), not one middle


def _flat_input(name, p, m, v, seed, overlap_grad=True, jitter=0.0, like_a_model=False):
    """Random times per (stage, chunk), the same for every micro-batch (+ ``jitter``).
    ``like_a_model``: the same on every stage but the first (embedding) and the last
    (output layer and loss), as a dense model's partition."""
    sched = SCHEDULES[name]
    n = sched.chunks(v)
    rng = np.random.default_rng(seed)

    def per(lo, hi):
        if like_a_model:
            x = np.repeat(rng.uniform(lo, hi, (1, n, 1)), p, axis=0)
            x[0] *= 1.05
            x[-1] *= 1.15
        else:
            x = rng.uniform(lo, hi, (p, n, 1))
        return np.repeat(x, m, axis=2)

    bwd = per(1.0, 3.0) + jitter * rng.uniform(0.0, 1.0, (p, n, m))
    buckets = [[list(rng.uniform(0.1, 0.5, rng.integers(1, 3))) for _ in range(n)]
               for _ in range(p)]
    return EngineInput(
        sched.steps(p, m, v), per(0.5, 1.5), bwd, rng.uniform(0.0, 0.3, p), buckets,
        rng.uniform(0.0, 0.5, p), rng.uniform(0.0, 0.4, p), route=sched.route(p, v),
        post_validation=sched.post_validation,
        wgrad=bwd * per(0.2, 0.5) if sched.uses_w else None,
        fwd_ep=per(0.0, 0.2), bwd_ep=per(0.0, 0.2), overlap_grad_reduce=overlap_grad,
        overlap_slowdown=0.1, p2p_bytes=1e6)


def _close(ref, got):
    """Same result to 1e-12 of the step time; the same record count."""
    scale = ref.step_time
    assert got.step_time == pytest.approx(ref.step_time, rel=1e-12, abs=0.0)
    for a, b in zip(ref.stages, got.stages, strict=True):
        for x, y in zip(dataclasses.astuple(a), dataclasses.astuple(b), strict=True):
            assert abs(x - y) <= 1e-12 * scale
    assert got.events == ref.events


@pytest.fixture
def eager(monkeypatch):
    """Fold any length and try every attempt (these pipelines are short)."""
    monkeypatch.setattr(periodic, "MIN_STEPS", 0)
    monkeypatch.setattr(periodic, "SHRINK", 1)
    monkeypatch.setattr(periodic, "BUDGET", 100.0)


def _both(inp, monkeypatch):
    """(full replay, replay with the fold) engine results, and whether it folded."""
    folded = periodic.fold(_Sim(inp, NullRecorder()), replay_all)
    with monkeypatch.context() as m:
        m.setattr(core, "replay", replay_all)
        want = run_engine(inp, NullRecorder())
    return want, run_engine(inp, NullRecorder()), folded


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("overlap_grad", [True, False])
def test_fold_equals_full_replay(name, overlap_grad, eager, monkeypatch):
    """Stages alike but the first and the last: every schedule but GPipe folds."""
    p, m, v = LONG[name]
    inp = _flat_input(name, p, m, v, seed=len(name) * 7 + overlap_grad,
                      overlap_grad=overlap_grad, like_a_model=True)
    want, got, folded = _both(inp, monkeypatch)
    assert folded == (name not in NO_FOLD)
    _close(want, got)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("seed", [1, 2])
def test_fold_unequal_stages(name, seed, eager, monkeypatch):
    """Every stage its own speed: steady states that repeat every few windows, or that a
    slow stage reaches late (then the zone check refuses and the full replay runs)."""
    p, m, v = LONG[name]
    want, got, _ = _both(_flat_input(name, p, m, v, seed=seed), monkeypatch)
    _close(want, got)


def test_no_fold_when_times_vary_per_micro_batch(eager, monkeypatch):
    inp = _flat_input("1f1b", 4, 96, 1, seed=3, jitter=0.05)
    want, got, folded = _both(inp, monkeypatch)
    assert not folded
    assert dataclasses.astuple(want.stages[0]) == dataclasses.astuple(got.stages[0])


def test_records_are_never_folded(eager):
    inp = _flat_input("1f1b", 4, 96, 1, seed=4)
    assert not periodic.fold(_Sim(inp, ListRecorder()), replay_all)
    assert len(run_engine(inp, ListRecorder(), engine="direct").records) > 0


def test_530b_on_35_stages_folds_exactly(monkeypatch):
    """A published long pipeline (MT-NLG 530B, PP35, 280 micro-batches, 1F1B): the fold's
    step and statistics equal the full replay's, at the default thresholds."""
    case = next(c for c in load_cases(categories=["dense_step_time"])
                if c.id == "narayanan2021-t2-530b-2240g")
    w, t = resolve(case.spec["workload"], case.topology, case.spec["overrides"],
                   case.topology_overrides)
    _, plan, _ = simulate_resolved(w, t)
    want, got, folded = _both(plan.engine_input, monkeypatch)
    assert folded
    _close(want, got)


def test_fold_some_backwards_split(eager, monkeypatch):
    """A hand-made order: 1F1B with a W after the B of every even micro-batch (those B
    are shorter): windows of two micro-batches; the result still equals the full replay."""
    inp = _flat_input("zb_h1", 3, 96, 1, seed=5, like_a_model=True)
    order = [[x for y in SCHEDULES["1f1b"].steps(3, 96, 1)[s] for x in
              ([y, Step("W", y.mb, 0)] if y.phase == "B" and y.mb % 2 == 0 else [y])]
             for s in range(3)]
    inp = dataclasses.replace(inp, schedule=order)
    want, got, folded = _both(inp, monkeypatch)
    assert folded
    _close(want, got)


def test_fold_remembers_what_did_not_fold(eager, monkeypatch):
    """Times that reach no periodic zone within the attempts are not tried again."""
    inp = _flat_input("1f1b", 5, 96, 1, seed=1)
    inp = dataclasses.replace(inp, schedule=[tuple(x) for x in inp.schedule])  # as plans give
    monkeypatch.setattr(periodic, "ATTEMPTS", ((0, 1),))  # no transient allowed: no zone
    assert not periodic.fold(_Sim(inp, NullRecorder()), replay_all)

    def tried(*_):
        raise AssertionError("attempted again")

    monkeypatch.setattr(periodic.windows, "layout", tried)
    assert not periodic.fold(_Sim(inp, NullRecorder()), replay_all)
