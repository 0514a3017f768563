"""Router draws in batch (issue 16): the vectorised paths against their per-call references.

The step draws and costs every (MoE layer, micro-batch) at once in numpy. Each batched
function has a per-call reference it must reproduce exactly: ``topk_counts`` called row
after row on one generator, ``inclusion_probs`` per row, ``alltoall_time`` per volume,
the cost of one draw alone, and the plan's per-micro-batch chunk costing.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from simulator.api import resolve
from simulator.collectives.algorithms import alltoall_time, alltoall_time_rows
from simulator.config import load_topology
from simulator.config.workload import MoEConfig
from simulator.hardware import Topology
from simulator.metrics.flops import kept_fraction
from simulator.moe import alltoall_bytes, rng_for
from simulator.moe.alltoall import rank_shares
from simulator.moe.batch import inclusion_probs_rows, make_rows, route_rows, topk_counts_rows
from simulator.moe.router import bias_residual, make_loads
from simulator.moe.sampling import (
    inclusion_probs,
    largest_remainder,
    softmax,
    topk_counts,
    uniform_counts,
)
from simulator.report.expert_load import expert_loads
from simulator.shape.plan_shape import microbatch_runs
from simulator.workload.chunk_cost import ChunkCoster
from simulator.workload.moe import draws as moe_draws
from simulator.workload.moe.dispatch import deepep_tokens
from simulator.workload.moe.part import PART_FIELDS, add_ep_breakdown
from simulator.workload.plan import build_plan

SMALL = {"parallelism.pipeline": 2, "parallelism.data": 4, "parallelism.tensor": 1,
         "parallelism.expert": 4, "parallelism.expert_tensor": 1, "model.num_layers": 4,
         "training.global_batch_size": 12, "training.micro_batch_size": 1,
         "model.seq_length": 512, "model.moe.router_load": "skewed",
         "model.moe.router_skew": 1.0}


DSV3_SMALL = {"model.num_layers": 4, "model.moe.first_k_dense": 1, "parallelism.pipeline": 2,
              "parallelism.virtual_pipeline": None, "parallelism.pipeline_schedule": "1f1b",
              "training.global_batch_size": 192, "model.seq_length": 1024}


def _builder(extra: dict | None = None, topo: str = "dgx-h100",
             workload: str = "mixtral-8x7b") -> ChunkCoster:
    base = SMALL if workload == "mixtral-8x7b" else DSV3_SMALL
    w, t = resolve(workload, topo, {**base, **(extra or {})})
    return ChunkCoster(w, Topology.from_config(t))


@pytest.mark.parametrize("tokens, experts, topk, skew", [
    (100_000, 64, 4, 1.5),  # threshold approximation
    (50, 8, 2, 1.0),  # exact Gumbel-top-k
    (60, 64, 1, 0.5),  # exact, top-1
    (10, 8, 8, 1.0),  # every expert picked
    (2_000, 4, 3, 8.0),  # threshold with the one-pick-per-token fix (per-row replay)
])
def test_topk_counts_rows_is_topk_counts_row_after_row(tokens, experts, topk, skew):
    logits = rng_for(2).standard_normal((12, experts)) * skew
    batch_rng, ref_rng = rng_for(3), rng_for(3)
    got = topk_counts_rows(logits, tokens, topk, batch_rng)
    ref = np.array([topk_counts(row, tokens, topk, ref_rng) for row in logits])
    assert np.array_equal(got, ref)
    assert batch_rng.integers(1 << 30) == ref_rng.integers(1 << 30)  # same stream consumed
    assert np.all(got.sum(axis=1) == tokens * topk)


def test_inclusion_probs_rows_is_inclusion_probs_per_row():
    logits = rng_for(1).standard_normal((30, 64)) * np.linspace(0, 3, 30)[:, None]
    got = inclusion_probs_rows(logits, 6)
    assert np.array_equal(got, np.array([inclusion_probs(row, 6) for row in logits]))
    same = np.zeros((5, 16))  # identical rows are solved once
    assert np.array_equal(inclusion_probs_rows(same, 2), np.tile(inclusion_probs(same[0], 2),
                                                                 (5, 1)))


@pytest.mark.parametrize("moe", [
    MoEConfig(num_experts=16, router_topk=2, router_load="skewed", router_skew=1.0,
              balancing="none", capacity_factor=1.0),
    MoEConfig(num_experts=64, router_topk=6, router_load="skewed", router_skew=0.5,
              balancing="aux_free_bias"),
    MoEConfig(num_experts=8, router_topk=2, router_load="uniform"),
])
def test_route_rows_rows_are_single_draws(moe):
    tokens, n = 700, 9
    rows = route_rows(moe, tokens, rng_for(5), n, step=40)
    rng = rng_for(5)  # reference: the logits block first, then each row's counts in turn
    z = rng.standard_normal((n, moe.num_experts)) if moe.router_load == "skewed" else None
    for i in range(n):
        if z is None:
            e = moe.num_experts
            ref = make_loads(uniform_counts(tokens * moe.router_topk, e), np.full(e, 1 / e), moe,
                             tokens)
        else:
            logits = moe.router_skew * z[i]
            select = bias_residual(logits, 40) if moe.balancing == "aux_free_bias" else logits
            ref = make_loads(topk_counts(select, tokens, moe.router_topk, rng), softmax(logits),
                             moe, tokens)
        got = rows.row(i)
        assert np.array_equal(got.expert_tokens, ref.expert_tokens)
        assert np.array_equal(got.kept_tokens, ref.kept_tokens)
        assert got.dropped == ref.dropped
        assert got.balance_loss == pytest.approx(ref.balance_loss, rel=1e-12)
        figs = rows.imbalance(4)
        for k, v in ref.imbalance(4).items():
            assert figs[k][i] == pytest.approx(v, rel=1e-12)


def test_route_rows_replays_recorded_layers(tmp_path):
    path = tmp_path / "loads.csv"
    path.write_text("layer,expert,tokens\n0,0,10\n0,1,30\n0,2,20\n0,3,40\n"
                    "1,0,5\n1,1,5\n1,2,5\n1,3,85\n")
    moe = MoEConfig(num_experts=4, router_topk=2, router_load="trace", router_trace=str(path),
                    capacity_factor=1.5)
    rows = route_rows(moe, 100, rng_for(5), 20)
    pick = rng_for(5).integers(2, size=20)
    table = np.array([[10, 30, 20, 40], [5, 5, 5, 85]])
    for i in range(20):
        recorded = table[pick[i]]
        ref = make_loads(largest_remainder(recorded.astype(float), 200), recorded / recorded.sum(),
                         moe, 100)
        got = rows.row(i)
        assert np.array_equal(got.kept_tokens, ref.kept_tokens) and got.dropped == ref.dropped
        assert got.balance_loss == pytest.approx(ref.balance_loss, rel=1e-12)
    assert set(pick.tolist()) == {0, 1}


@pytest.mark.parametrize("extra", [
    {},  # all-to-all dispatcher inside one NVLink domain
    {"model.moe.capacity_factor": 1.0, "training.precision": "fp8"},
    {"model.moe.token_dispatcher_type": "allgather"},
    {"model.moe.num_experts": 16, "parallelism.data": 16, "parallelism.expert": 16,
     "training.global_batch_size": 32, "model.moe.token_dispatcher_type": "flex",
     "model.moe.max_nodes_per_token": 1, "model.moe.router_topk": 4},  # DeepEP over 2 nodes
])
def test_pool_costs_equal_each_draw_costed_alone(extra):
    moe = _builder(extra).moe
    rows = moe.table.rows
    fwd, bwd, redo = moe.cost_rows()
    assert np.array_equal(moe.expert_seconds(rows.kept_tokens, True),
                          np.array([moe.expert_seconds(k, True) for k in rows.kept_tokens]))
    for i in (0, len(rows) // 2, len(rows) - 1):
        one = make_rows(rows.expert_tokens[i:i + 1], np.full((1, rows.expert_tokens.shape[1]),
                                                             1.0), moe.moe, moe.tokens * moe.ep)
        alone_f, alone_b, alone_r = moe.cost_rows(one)
        for k in fwd:
            assert fwd[k][i] == alone_f[k][0] and bwd[k][i] == alone_b[k][0], k
            assert redo[k][i] == alone_r[k][0], k


def test_dispatch_volumes_of_every_draw_are_the_single_draw_volumes():
    moe = _builder({"model.moe.capacity_factor": 1.0, "model.moe.router_skew": 2.0}).moe
    rows, d = moe.table.rows, moe.dispatcher
    send, recv = d.flat_bytes(rows)
    share, kept = rows.rank_shares(moe.ep)
    nvl, rdma = deepep_tokens(share, rows.topk, 2, 1)
    for i in range(len(rows)):
        one = rows.row(i)
        ref_send, ref_recv = alltoall_bytes(one, moe.ep, moe.tokens, float(moe.h))
        assert np.array_equal(send[i], ref_send) and np.array_equal(recv[i], ref_recv)
        ref_share, ref_kept = rank_shares(one, moe.ep)
        assert np.array_equal(share[i], ref_share) and kept[i] == ref_kept
        ref_nvl, ref_rdma = deepep_tokens(ref_share, rows.topk, 2, 1)
        assert np.array_equal(nvl[i], ref_nvl) and np.array_equal(rdma[i], ref_rdma)
    assert rows.dropped.sum() > 0  # the capacity cut is in the volumes


def test_stacked_parts_are_the_single_parts():
    moe = _builder().moe
    table = moe.table
    for layer in (0, 3):
        for backward in (False, True):
            cols = moe.stacked(backward)[:, table.entry[table.layer_row[layer]]]
            for mb in range(moe.w.num_microbatches):
                one = moe.part(layer, mb, backward)
                assert np.array_equal(one.loads.kept_tokens, moe.route(layer, mb).kept_tokens)
                assert [getattr(one, k) for k in PART_FIELDS] == cols[:, mb].tolist()


@pytest.mark.parametrize("workload, extra", [
    ("mixtral-8x7b", {"training.recompute": "full", "parallelism.virtual_pipeline": 2,
                      "parallelism.pipeline_schedule": "interleaved",
                      "training.global_batch_size": 16}),
    ("mixtral-8x7b", {"parallelism.pipeline_schedule": "zb_h1"}),
    # a dense first layer, MTP (not re-run, not in W), recompute of the MoE modules only
    ("deepseek-v3", {"training.recompute": "selective", "training.recompute_modules": ["moe"],
                     "parallelism.pipeline_schedule": "zb_h1",
                     "parallelism.pipeline_model_parallel_layout": None}),
])
def test_plan_costs_every_micro_batch_as_the_per_micro_batch_loop(workload, extra):
    """build_plan adds the MoE parts of all chunks and micro-batches in numpy; the
    reference costs each (stage, chunk, micro-batch) on its own and accumulates."""
    bld = _builder(extra, workload=workload)
    w, shape = bld.w, bld.shape
    plan = build_plan(w, bld.topo, ops=False)
    got = plan.engine_input
    assert (got.wgrad is not None) == ("zb" in w.parallelism.pipeline_schedule)
    P, M = w.parallelism.pipeline, w.num_microbatches
    runs = microbatch_runs(shape.schedule, P, M, w.parallelism.vp)
    totals = [dict.fromkeys(("compute", "tp", "cp", "ep"), 0.0) for _ in range(P)]
    ep: list[dict[str, float]] = [{} for _ in range(P)]
    for s in range(P):
        for c in range(shape.chunks):
            for k, mb in enumerate(runs[s][c]):
                f, b, wg = bld.chunk(s, c, mb, shape.first(s, c), shape.last(s, c), ops=False)
                want = [(got.fwd, f.duration), (got.bwd, b.duration),
                        (got.fwd_ep, f.exposed["ep"]), (got.bwd_ep, b.exposed["ep"])]
                if got.wgrad is not None:  # schedules that split W off the backward
                    want.append((got.wgrad, wg))
                for table, value in want:
                    assert table[s, c, mb] == pytest.approx(value, rel=1e-13, abs=0)
                if k == 0:
                    assert plan.phases[("B", s, c)].duration == pytest.approx(b.duration,
                                                                              rel=1e-13)
                for part in bld.ep_parts:
                    add_ep_breakdown(ep[s], part)
                for ph in (f, b):
                    totals[s]["compute"] += ph.compute
                    for axis in ("tp", "cp", "ep"):
                        totals[s][axis] += ph.exposed[axis]
    for s in range(P):
        assert plan.totals[s] == pytest.approx(totals[s], rel=1e-12)
        assert plan.ep_breakdown[s] == pytest.approx(ep[s], rel=1e-12)


def test_draw_table_own_draws_then_a_stratified_shared_pool(monkeypatch):
    moe = _builder().moe  # skewed popularity per draw (aux loss): never shared
    table = moe.table
    pairs = table.entry.size  # 4 layers x 3 micro-batches
    assert len(table.rows) == pairs and np.array_equal(table.entry.ravel(), np.arange(pairs))
    bias = _builder({"model.moe.balancing": "aux_free_bias"}).moe  # same selection every draw
    monkeypatch.setattr(moe_draws, "MIN_POOL", 5)
    monkeypatch.setattr(moe_draws, "NOISE_TOL", 1.0)
    shared = moe_draws.draw_table(bias.w, bias.tokens * bias.ep, False)
    assert len(shared.rows) == 5
    assert sorted(shared.uses().tolist()) == [2, 2, 2, 3, 3]  # 12 pairs over 5 draws
    again = moe_draws.draw_table(bias.w, bias.tokens * bias.ep, False)
    assert np.array_equal(again.entry, shared.entry)
    assert np.array_equal(again.rows.expert_tokens, shared.rows.expert_tokens)
    monkeypatch.setattr(moe_draws, "NOISE_TOL", 0.05)  # cv^2 = 7/8 * 8 / (4096 * 2) = 7/8192
    assert moe_draws.pool_size(bias.moe, 4096, 10_000) == 5  # cv^2 / tol^2 = 0.34 -> MIN_POOL
    monkeypatch.setattr(moe_draws, "NOISE_TOL", 0.002)
    assert moe_draws.pool_size(bias.moe, 4096, 10_000) == 214  # 7/8192 / 0.002^2 = 213.6
    assert moe_draws.pool_size(bias.moe, 4096, 100) == 100  # fewer pairs than that: own draws
    assert moe_draws.pool_size(moe.moe, 4096, 10_000) == 10_000
    uniform = _builder({"model.moe.router_load": "uniform"}).moe
    assert len(uniform.table.rows) == 1 and len(uniform.draws()) == 1


def test_uniform_routing_counts_every_pair_of_routed_flops():
    bld = _builder({"model.moe.router_load": "uniform"})
    kept, total, pairs = bld.moe.kept_totals()
    assert pairs == 4 * bld.w.num_microbatches  # every MoE layer, every micro-batch
    assert kept == total == pairs * bld.moe.tokens * bld.moe.ep * 2
    assert kept_fraction(build_plan(bld.w, bld.topo)) == 1.0


def test_alltoall_time_rows_is_alltoall_time_per_volume():
    volumes = np.concatenate([[0.0, 1.0], np.logspace(2, 10, 25)])
    for path in sorted((Path(__file__).resolve().parents[1] / "topologies").glob("*.yaml")):
        topo = Topology.from_config(load_topology(path))
        for n in (2, 8, 64):
            place = topo.place(n, 1)
            ref = [alltoall_time(v, v * n / (n - 1), place, topo) if v > 0 else 0.0
                   for v in volumes]
            # equal to the last bits: numpy's SIMD power and libm's pow may round apart
            np.testing.assert_allclose(alltoall_time_rows(volumes, place, topo), ref,
                                       rtol=1e-14, atol=0, err_msg=f"{path} {n}")
    assert math.isfinite(float(alltoall_time_rows(np.array([1e9]), place, topo)[0]))


@pytest.mark.parametrize("load", ["skewed", "uniform"])
def test_moe_config_without_moe_layers_has_no_draws(load):
    bld = _builder({"model.moe.first_k_dense": 4, "model.moe.router_load": load})
    plan = build_plan(bld.w, bld.topo)
    assert bld.moe.draws() == [] and bld.moe.mean_imbalance() == {}
    assert not any(k.startswith("ep_") for k in plan.imbalance)
    assert kept_fraction(plan) == 1.0 and np.all(plan.engine_input.fwd > 0)


def test_expert_load_figure_shows_the_draw_the_step_uses():
    moe = _builder().moe
    for layer, mb in ((0, 0), (3, 2)):
        info = expert_loads(moe.w, layer, mb)
        assert info["tokens"] == moe.tokens * moe.ep
        assert np.array_equal(info["loads"].expert_tokens, moe.route(layer, mb).expert_tokens)
