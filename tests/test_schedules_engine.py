"""Pipeline schedules and the event engine against closed forms and hand traces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import EngineInput, run_engine
from simulator.errors import ConfigError
from simulator.schedules import SCHEDULES, bubble_closed_form, build_schedule


def _engine(name, p, m, v=1, tf=1.0, tb=2.0, p2p=0.0, buckets=None, opt=0.0, ag=0.0, **kw):
    fwd = np.full((p, v, m), tf / v)
    bwd = np.full((p, v, m), tb / v)
    dp = buckets or [[[] for _ in range(v)] for _ in range(p)]
    return EngineInput(build_schedule(name, p, m, v), fwd, bwd, np.full(p, p2p), dp,
                       np.full(p, opt), np.full(p, ag), **kw)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 2), (4, 8), (8, 3), (16, 16), (1, 5)])
def test_bubble_matches_closed_form(name, p, m):
    run = run_engine(_engine(name, p, m))
    for st_ in run.stages:
        idle = (run.step_time - st_.busy) / run.step_time
        assert idle == pytest.approx(bubble_closed_form(p, m), abs=1e-12)
    assert run.step_time == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (8, 16, 3)])
def test_interleaving_divides_bubble_by_v(p, m, v):
    flat = run_engine(_engine("1f1b", p, m))
    inter = run_engine(_engine("interleaved", p, m, v))
    bubble_flat = flat.step_time - flat.stages[0].busy
    bubble_inter = inter.step_time - inter.stages[0].busy
    assert bubble_inter == pytest.approx(bubble_flat / v, rel=1e-12)
    frac = bubble_inter / inter.step_time
    assert frac == pytest.approx(bubble_closed_form(p, m, v), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 12), v=st.integers(1, 3),
       name=st.sampled_from(sorted(SCHEDULES)))
def test_schedule_lists_every_phase_once_forward_first(p, m, v, name):
    sched = SCHEDULES[name]
    try:
        sched.check(p, m, v)
    except ConfigError:
        return
    chunks = sched.chunks(v)
    for steps in build_schedule(name, p, m, v):
        keys = [(s.phase, s.mb, s.chunk) for s in steps]
        assert len(keys) == len(set(keys))
        pairs = {(mb, c) for _, mb, c in keys}
        if name in ("gpipe", "1f1b", "interleaved"):
            assert sorted(keys) == sorted({(ph, i, c) for ph in "FB" for i in range(m)
                                           for c in range(v)})
        # every micro-batch passes every stage (DualPipe: on the chunk of its direction)
        assert {mb for mb, _ in pairs} == set(range(m)) and {c for _, c in pairs} <= set(
            range(chunks))
        phases = {"F", "B", "W"} if sched.uses_w else {"F", "B"}
        seen = set()
        for s in steps:
            assert s.phase in phases
            if s.phase in "BW":
                assert ("F" if s.phase == "B" else "B", s.mb, s.chunk) in seen
            seen.add((s.phase, s.mb, s.chunk))
        assert all(("F", mb, c) in seen and ("B", mb, c) in seen for mb, c in pairs)


def test_one_f_one_b_in_flight_limit():
    for s, steps in enumerate(build_schedule("1f1b", 4, 8)):
        live = peak = 0
        for st_ in steps:
            live += 1 if st_.phase == "F" else -1
            peak = max(peak, live)
        assert peak == 4 - s


def test_tiny_two_stage_trace_matches_hand_written():
    """2 stages, 2 micro-batches, 1F1B, F=1 s, B=2 s, p2p 0.5 s, one DP bucket of 1 s."""
    buckets = [[[1.0]], [[1.0]]]
    run = run_engine(_engine("1f1b", 2, 2, p2p=0.5, buckets=buckets, opt=0.25))
    got = sorted((r.stage, r.stream, r.name, r.start, r.end, r.mb) for r in run.records)
    expected = sorted([
        # stage 0: F0, F1 (warm-up 1), B0 after grad arrives, B1
        (0, "compute", "F", 0.0, 1.0, 0), (0, "pp", "send_F", 1.0, 1.5, 0),
        (0, "compute", "F", 1.0, 2.0, 1), (0, "pp", "send_F", 2.0, 2.5, 1),
        (1, "compute", "F", 1.5, 2.5, 0), (1, "compute", "B", 2.5, 4.5, 0),
        (1, "pp", "send_B", 4.5, 5.0, 0), (1, "compute", "F", 4.5, 5.5, 1),
        (1, "compute", "B", 5.5, 7.5, 1), (1, "pp", "send_B", 7.5, 8.0, 1),
        (0, "compute", "B", 5.0, 7.0, 0), (0, "compute", "B", 8.0, 10.0, 1),
        # the bucket is released at the end of the last backward, then optimizer
        (1, "dp", "grad_sync", 7.5, 8.5, -1), (1, "optimizer", "optimizer", 8.5, 8.75, -1),
        (0, "dp", "grad_sync", 10.0, 11.0, -1), (0, "optimizer", "optimizer", 11.0, 11.25, -1),
    ])
    assert got == expected
    assert run.step_time == pytest.approx(11.25)
    # stage 0 waited 5.0 - 2.0 = 3.0 s for B0's gradient, of which 0.5 s was the transfer
    assert run.stages[0].pp_wait == pytest.approx(0.5 + 0.5)


def test_grad_reduce_overlap_hides_dp_behind_backward():
    buckets = [[[0.2] * 5]]
    over = run_engine(_engine("1f1b", 1, 4, buckets=buckets))
    serial = run_engine(_engine("1f1b", 1, 4, buckets=buckets, overlap_grad_reduce=False))
    assert serial.step_time == pytest.approx(12.0 + 1.0)
    assert over.step_time == pytest.approx(12.0 + 0.2)


def test_microbatch_group_size_follows_megatron_core():
    from simulator.schedules.interleaved import SCHEDULE as inter
    from simulator.schedules.interleaved import schedule_table

    # Megatron-Core ModelParallelConfig docstring, PP 2 VP 2, N 3, M 5:
    # rank 0 | 0 1 2 0 1 2 3 4 3 4 (micro-batches; chunks 0 0 0 1 1 1 0 0 1 1)
    assert schedule_table(5, 2, 3) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1),
                                       (3, 0), (4, 0), (3, 1), (4, 1)]
    g = inter.grouped(3)
    assert g is inter.grouped(3) and g.group == 3  # one instance per group size
    steps = g.steps(2, 5, 2)
    warm = 2 * (2 - 0 - 1) + (2 - 1) * 3  # Megatron's warm-up on rank 0: 5
    assert [tuple(s) for s in steps[0][:warm]] == \
        [("F", 0, 0), ("F", 1, 0), ("F", 2, 0), ("F", 0, 1), ("F", 1, 1)]
    assert g.in_flight(2, 5, 2, 0) == pytest.approx((warm + 1) / 2)
    # the default group (N = p) is the paper's order, step for step
    assert inter.grouped(4).steps(4, 8, 2) == inter.steps(4, 8, 2)
    # Megatron-Core's rules: p <= N <= m, and m % N is 0 or at least p
    for n, m in [(1, 8), (9, 8), (3, 4)]:
        with pytest.raises(ConfigError) as exc:
            inter.grouped(n).check(2, m, 2)
        assert exc.value.field == "parallelism.microbatch_group_size_per_vp_stage"
    inter.grouped(3).check(2, 5, 2)


@pytest.mark.parametrize("p,m,v,n", [(2, 8, 2, 4), (4, 8, 2, 8), (4, 12, 3, 6)])
def test_larger_groups_keep_the_bubble_and_hold_more(p, m, v, n):
    # with equal stages and free sends a breadth-first group has the same bubble
    # (p-1)/(vm+p-1) as the depth-first default, and keeps more micro-batches in flight
    from simulator.schedules.interleaved import SCHEDULE as inter

    fwd, bwd = np.full((p, v, m), 1.0 / v), np.full((p, v, m), 2.0 / v)
    none = [[[] for _ in range(v)] for _ in range(p)]
    run = run_engine(EngineInput(inter.grouped(n).steps(p, m, v), fwd, bwd, np.zeros(p), none,
                                 np.zeros(p), np.zeros(p)))
    frac = (run.step_time - run.stages[0].busy) / run.step_time
    assert frac == pytest.approx(bubble_closed_form(p, m, v), rel=1e-12)
    assert inter.grouped(n).in_flight(p, m, v, 0) > inter.in_flight(p, m, v, 0)


def test_workload_group_size_reaches_schedule_memory_and_rules():
    from simulator import simulate
    from simulator.config import load_workload

    base = simulate("llama3-70b", "dgx-h100", variability=False)  # TP8 PP4 VP5, 64 mbs
    same = simulate("llama3-70b", "dgx-h100", variability=False,
                    overrides={"parallelism.microbatch_group_size_per_vp_stage": 4})
    assert same.step_time_s == base.step_time_s
    assert same.memory_per_gpu_GB == base.memory_per_gpu_GB
    wide = simulate("llama3-70b", "dgx-h100", variability=False,
                    overrides={"parallelism.microbatch_group_size_per_vp_stage": 16})
    assert wide.memory_breakdown_GB["activations"] > base.memory_breakdown_GB["activations"]
    with pytest.raises(ConfigError) as exc:
        simulate("llama3-70b", "dgx-h100", overrides={
            "parallelism.pipeline_schedule": "1f1b", "parallelism.virtual_pipeline": None,
            "parallelism.microbatch_group_size_per_vp_stage": 4})
    assert exc.value.field == "parallelism.microbatch_group_size_per_vp_stage"
    with pytest.raises(ConfigError):
        load_workload("llama3-70b", {"parallelism.microbatch_group_size_per_vp_stage": 0})
