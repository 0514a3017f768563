"""Zero-bubble and DualPipe schedules against the closed forms of their sources.

Notation of the DeepSeek-V3 report / DualPipe README table: F forward chunk, B
full backward chunk, W its weight-gradient part, F&B two mutually overlapped
chunks, p stages. Synthetic equal stages, free communication, no DP or optimizer.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator import ConfigError
from simulator.api import plan, resolve, simulate_resolved
from simulator.engine import EngineInput, run_engine
from simulator.report.figures import close
from simulator.report.timeline import timeline_figure
from simulator.schedules import SCHEDULES
from simulator.shape.plan_shape import plan_shape
from simulator.sweep.search_tasks import step_lower_bound


def _run(name, p, m, F, B, W, ef=0.0, eb=0.0, buckets=None):
    """Replay ``name`` with per-chunk F, full backward B (of which W), EP exposed ef / eb."""
    sched = SCHEDULES[name]
    n = sched.chunks(1)
    full = (p, n, m)
    inp = EngineInput(sched.steps(p, m, 1), np.full(full, F), np.full(full, B), np.zeros(p),
                      buckets or [[[] for _ in range(n)] for _ in range(p)], np.zeros(p),
                      np.zeros(p), route=sched.route(p, 1), post_validation=sched.post_validation,
                      wgrad=np.full(full, W) if sched.uses_w else None,
                      fwd_ep=np.full(full, ef), bwd_ep=np.full(full, eb))
    return run_engine(inp)


def _bubble(run) -> float:
    """Idle time of the least busy stage: the step minus its own work."""
    return max(run.step_time - st.busy for st in run.stages)


TIMES = [(1.0, 2.0, 1.0), (1.0, 2.2, 0.7), (1.2, 1.9, 0.9), (2.0, 3.0, 1.0)]


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 16)])
@pytest.mark.parametrize("F,B,W", TIMES)
def test_one_f_one_b_bubble(p, m, F, B, W):
    assert _bubble(_run("1f1b", p, m, F, B, W)) == pytest.approx((p - 1) * (F + B), abs=1e-9)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 4), (8, 16)])
@pytest.mark.parametrize("F,B,W", TIMES)
def test_zb_h1_bubble_is_zb1p(p, m, F, B, W):
    """ZB1P: (p-1)(F+B-2W), at 1F1B's peak memory (Qi et al. 2024, Table 1)."""
    assert _bubble(_run("zb_h1", p, m, F, B, W)) == pytest.approx((p - 1) * (F + B - 2 * W),
                                                                 abs=1e-9)
    sched = SCHEDULES["zb_h1"]
    assert [sched.in_flight(p, m, 1, s) for s in range(p)] == [min(p, m)] * p
    # the last stage's peak holds W-deferred tensors where 1F1B's held activations
    assert sched.w_deferred(p, m, 1, p - 1) >= min(p - 1, m - 1)


@pytest.mark.parametrize("p,m", [(4, 8), (4, 12), (8, 24)])
@pytest.mark.parametrize("F,B,W", [(1.0, 2.0, 1.0), (1.0, 2.2, 0.7), (1.2, 1.9, 0.9),
                                   (1.0, 1.5, 0.5)])
def test_zb_h2_near_zero_bubble_with_twice_the_memory(p, m, F, B, W):
    """(p-1)(F+B-3W), zero when F = B - W = W; with post-validation (Qi et al. Sec. 4)."""
    run = _run("zb_h2", p, m, F, B, W)
    assert _bubble(run) == pytest.approx((p - 1) * (F + B - 3 * W), abs=1e-9)
    if (F, B, W) == (1.0, 2.0, 1.0):
        assert _bubble(run) == pytest.approx(0.0, abs=1e-9)
    # 2p-1 activations in flight, plus one W-deferred set counted whole (upper bound)
    sched = SCHEDULES["zb_h2"]
    assert sched.in_flight(p, m, 1, 0) == 2 * p and sched.w_deferred(p, m, 1, 0) == 1


@pytest.mark.parametrize("name,p,m", [("dualpipe", 4, 8), ("dualpipe", 4, 12),
                                      ("dualpipe", 8, 20), ("dualpipe", 6, 14),
                                      ("dualpipe_v", 2, 4), ("dualpipe_v", 4, 12),
                                      ("dualpipe_v", 6, 14)])
@pytest.mark.parametrize("F,W,ef,eb", [(1.0, 1.0, 0.0, 0.0), (1.0, 0.8, 0.0, 0.0),
                                       (2.0, 2.0, 0.0, 0.0), (1.0, 1.0, 0.3, 0.3),
                                       (1.0, 1.0, 0.5, 0.2)])
def test_dualpipe_bubble(name, p, m, F, W, ef, eb):
    """(P/2-1)(F&B+B-3W), P pipeline stages (2p for DualPipeV), when the input-gradient
    part of a backward equals the forward (B = F + W), the README figure's regime."""
    B = F + W
    fb = F + B - (min(ef, B - eb) + min(eb, F - ef))  # each hides the other's all-to-all
    stages = p if name == "dualpipe" else 2 * p
    run = _run(name, p, m, F, B, W, ef, eb)
    assert _bubble(run) == pytest.approx((stages / 2 - 1) * (fb + B - 3 * W), abs=1e-9)


def test_dense_f_and_b_is_the_two_back_to_back():
    plain = _run("dualpipe", 4, 8, 1.0, 2.0, 1.0)
    assert any(r.fused for r in plain.records)
    assert max(st.fb_saved for st in plain.stages) == 0.0


@pytest.mark.parametrize("name,p,m,chunks", [("dualpipe", 4, 8, 5), ("dualpipe", 8, 16, 9),
                                             ("dualpipe_v", 4, 8, 9), ("dualpipe_v", 8, 16, 17)])
def test_dualpipe_holds_pp_plus_one_activations(name, p, m, chunks):
    """README table: activations PP+1 chunks per device (PP = 2p stages for DualPipeV)."""
    sched = SCHEDULES[name]
    assert max(sched.in_flight(p, m, 1, s) for s in range(p)) * 2 == chunks


def test_dualpipe_holds_parameters_twice():
    base = {"parallelism.pipeline": 4, "model.num_layers": 8, "training.global_batch_size": 16}
    one = plan_shape(resolve("tiny", "dgx-h100", base)[0])
    two = plan_shape(resolve("tiny", "dgx-h100",
                             {**base, "parallelism.pipeline_schedule": "dualpipe"})[0])
    v = plan_shape(resolve("tiny", "dgx-h100",
                           {**base, "parallelism.pipeline_schedule": "dualpipe_v"})[0])
    assert two.schedule.param_copies(4, 1) == 2 and v.schedule.param_copies(4, 1) == 1
    layers = [sum(one.partition.layers[s]) for s in range(4)]
    assert [sum(two.partition.layers[s]) for s in range(4)] == [2 * n for n in layers]
    mid = [two.params[s].total / one.params[s].total for s in (1, 2)]
    assert mid == pytest.approx([2.0, 2.0])
    assert sum(x.total for x in v.params) == pytest.approx(sum(x.total for x in one.params))


def test_grad_reduce_starts_when_the_chunks_last_w_ends():
    buckets = [[[0.5]] for _ in range(4)]
    run = _run("zb_h1", 4, 8, 1.0, 2.0, 1.0, buckets=buckets)
    for s in range(4):
        last_w = max(r.end for r in run.records if r.stage == s and r.name == "W")
        sync = [r for r in run.records if r.stage == s and r.name == "grad_sync"]
        assert sync[0].start == pytest.approx(last_w)
    # B runs the backward minus W; W the rest
    b = next(r for r in run.records if r.name == "B")
    w = next(r for r in run.records if r.name == "W")
    assert (b.end - b.start, w.end - w.start) == pytest.approx((1.0, 1.0))


@pytest.mark.parametrize("overrides,field,allowed", [
    ({"parallelism.pipeline": 3, "model.num_layers": 6, "training.global_batch_size": 24},
     "parallelism.pipeline", "dualpipe needs an even pipeline size"),
    ({"training.global_batch_size": 6}, "training.global_batch_size",
     "even micro-batch count of at least 2 * pipeline (4)"),
    ({"parallelism.virtual_pipeline": 2}, "parallelism.pipeline_schedule",
     "must be 'interleaved' when virtual_pipeline > 1"),
])
def test_dualpipe_rules(overrides, field, allowed):
    with pytest.raises(ConfigError) as info:
        resolve("tiny", "dgx-h100", {"parallelism.pipeline_schedule": "dualpipe", **overrides})
    assert info.value.field == field and allowed in info.value.message()


def test_unknown_schedule_lists_the_registry():
    with pytest.raises(ConfigError) as info:
        resolve("tiny", "dgx-h100", {"parallelism.pipeline_schedule": "zb_h3"})
    assert "dualpipe" in info.value.message() and "zb_h1" in info.value.message()


@pytest.mark.parametrize("name", ["zb_h1", "zb_v", "dualpipe", "dualpipe_v"])
def test_plans_cost_w_as_the_weight_gradient_gemms(name):
    pl = plan("tiny", "dgx-h100", **{"parallelism.pipeline_schedule": name,
                                     "training.global_batch_size": 16})
    inp = pl.engine_input
    ran = inp.fwd > 0
    assert ran.any() and (inp.wgrad[ran] > 0).all() and (inp.wgrad[ran] < inp.bwd[ran]).all()
    # the weight-gradient GEMMs are about a third of a backward without recompute
    assert 0.2 < float(inp.wgrad[ran].sum() / inp.bwd[ran].sum()) < 0.5


@pytest.mark.parametrize("name,label", [("zb_h1", "weight grad (W)"),
                                        ("dualpipe", "F&B: overlapped pair")])
def test_timeline_draws_w_steps_and_fused_pairs(name, label):
    w, t = resolve("tiny", "dgx-h100", {"parallelism.pipeline": 4, "model.num_layers": 8,
                                        "training.global_batch_size": 16,
                                        "parallelism.pipeline_schedule": name})
    result, pl, engine = simulate_resolved(w, t, keep_records=True)
    fig = timeline_figure(pl, engine, result)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    close(fig)
    assert label in labels
    names = {r.name for r in engine.records if r.stream == "compute"}
    assert names == {"F", "B", "W"}  # DualPipe splits its late backwards too
    assert any(r.fused for r in engine.records) == (name == "dualpipe")


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_search_lower_bound_holds_for_every_schedule(name):
    over = {"parallelism.pipeline_schedule": name, "parallelism.pipeline": 4,
            "model.num_layers": 8, "training.global_batch_size": 32,
            "model.moe.num_experts": 4, "parallelism.expert": 2, "parallelism.expert_tensor": 1}
    if name == "interleaved":
        over["parallelism.virtual_pipeline"] = 2
    inp = plan("tiny", "dgx-h100", **over).engine_input
    assert step_lower_bound(inp) <= run_engine(inp).step_time * (1 + 1e-12)
