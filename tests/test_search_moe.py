"""Plan search on an MoE model: the bound stays a lower bound, the answer stays the same.

The search shares router-draw tables between plans (workload/moe_draws.py) and, per
table, the all-to-all volumes (workload/moe_dispatch.py) and the per-draw costs of plans
priced alike (workload/moe_costs.py); its bound-only plans skip what
the bound does not read (workload/plan.py). None of that may change a number: the search
with every plan drawing afresh (the slow path) must give the same result, and every
fitting plan's bound must stay at or below its simulated step (brute force).
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.api import resolve, simulate_resolved
from simulator.config.loader import apply_overrides, read_document
from simulator.hardware import Topology
from simulator.sweep import search
from simulator.sweep.candidates import resolve_shapes, shapes, with_recompute
from simulator.sweep.search_tasks import fit_and_bound
from simulator.workload.moe import draws as moe_draws
from simulator.workload.moe.draws import ByteLRU, draw_table
from simulator.workload.plan import build_plan

# Mixtral 8x7B's MoE block (8 experts, top-2, skewed router, aux loss) on a small body
TINY = {"model.num_layers": 4, "model.hidden_size": 1024, "model.num_attention_heads": 16,
        "model.ffn_hidden_size": 2048, "model.seq_length": 1024,
        "training.global_batch_size": 16}
BIAS = {**TINY, "model.moe.balancing": "aux_free_bias"}  # a shared pool (DeepSeek-V3's)
ROUNDING = 1e-12  # the bound's summation order may put it one rounding error above


def _search(overrides: dict, schedules: str | None = None):
    return search("mixtral-8x7b", "dgx-h100", 8, top=5, executor="serial",
                  overrides=overrides, micro_batch_sizes=(1, 2), max_context=2,
                  schedules=schedules)


def _plain(result) -> dict:
    d = result.to_dict()
    d.pop("elapsed_s", None)
    return d


@pytest.mark.parametrize("overrides,schedules", [(TINY, None), (BIAS, "1f1b,dualpipe")])
def test_search_is_unchanged_when_every_plan_draws_afresh(overrides, schedules, monkeypatch):
    shared = _search(overrides, schedules)
    monkeypatch.setattr(moe_draws._TABLES, "get", lambda key: None)  # the slow path
    fresh = _search(overrides, schedules)
    assert shared.counts["pruned_by_bound"] > 0 and shared.counts["simulated"] > 0
    assert _plain(shared) == _plain(fresh)


def test_worker_processes_give_the_serial_result():
    """Plans grouped by their draws run in worker tasks; the result is the serial one."""
    local = search("mixtral-8x7b", "dgx-h100", 8, top=5, executor="local", workers=2,
                   overrides=TINY, micro_batch_sizes=(1, 2), max_context=2)
    assert _plain(local) == _plain(_search(TINY))


@pytest.mark.parametrize("overrides", [TINY, BIAS])
def test_bound_is_below_every_simulated_step_and_top_matches_brute_force(overrides):
    data, _, _ = read_document("mixtral-8x7b", "workloads")
    w, t = resolve("mixtral-8x7b", "dgx-h100", overrides)
    valid, _ = resolve_shapes(apply_overrides(data, overrides), t,
                              shapes(w, t, 8, (1, 2), 2))
    speeds, ratios = [], []
    for _, wv in valid:
        rc, _, bound, error = fit_and_bound((wv, t))
        assert error is None
        if rc is None:
            continue
        run = simulate_resolved(with_recompute(wv, rc), t)[0]
        ratios.append(bound / run.step_time_s)
        speeds.append(run.tokens_per_s)
    assert len(ratios) > 100 and max(ratios) <= 1 + ROUNDING
    assert min(ratios) > 0.5  # and not trivially low: it prunes
    assert list(_search(overrides).plans.tokens_per_s) == sorted(speeds, reverse=True)[:5]


def test_draw_tables_are_shared_read_only_and_equal_to_a_fresh_draw():
    w, _ = resolve("mixtral-8x7b", "dgx-h100", TINY)
    tokens = 2048
    a, b = draw_table(w, tokens, False), draw_table(w, tokens, False)
    assert a is b
    moe_draws.clear_draw_tables()
    fresh = draw_table(w, tokens, False)
    assert fresh is not a
    for x, y in ((a.entry, fresh.entry), (a.rows.kept_tokens, fresh.rows.kept_tokens),
                 (a.rows.expert_tokens, fresh.rows.expert_tokens),
                 (a.rows.balance_loss, fresh.rows.balance_loss)):
        np.testing.assert_array_equal(x, y)
        assert not x.flags.writeable
    with pytest.raises(ValueError):
        a.rows.kept_tokens[0, 0] = 1
    # every input of the draw is in the key: another seed, token count or layer count
    # draws another table
    w_seed, _ = resolve("mixtral-8x7b", "dgx-h100", {**TINY, "training.seed": 7})
    w_layers, _ = resolve("mixtral-8x7b", "dgx-h100", {**TINY, "model.num_layers": 8})
    for other in (draw_table(w_seed, tokens, False), draw_table(w, tokens + 2, False),
                  draw_table(w_layers, tokens, False)):
        assert other is not a
        assert not np.array_equal(other.rows.kept_tokens[:4], a.rows.kept_tokens[:4])


def test_a_changed_pool_size_draws_its_own_table(monkeypatch):
    """simulator.studies.moe_draws sets MIN_POOL to give every pair its own draw."""
    w, _ = resolve("deepseek-v3", "dgx-h100")
    tokens = 131072  # bias balancing, many tokens: a shared pool of MIN_POOL draws
    pooled = draw_table(w, tokens, False)
    monkeypatch.setattr(moe_draws, "MIN_POOL", 1 << 62)
    own = draw_table(w, tokens, False)
    assert len(pooled.rows) < pooled.entry.size == own.entry.size == len(own.rows)


def test_cache_drops_the_least_recently_used_past_its_budget():
    cache = ByteLRU(budget=20)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    assert cache.get("a") == 1  # now "b" is the least recently used
    cache.put("c", 3, 10)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    cache.put("c", 4, 5)  # replaced: counted once
    assert cache.used == 15 and cache.get("c") == 4
    cache.put("d", 5, 50)  # over budget alone: the newest stays
    assert cache.get("d") == 5 and cache.get("a") is None and cache.used == 50


def test_shared_volumes_price_the_placement_of_each_plan():
    """Two plans reading one table (same EP, tokens) on 8-GPU and 4-GPU nodes keep their
    own all-to-all times, each equal to the times of a private (writable) copy."""
    over = {**TINY, "parallelism.tensor": 1, "parallelism.pipeline": 1,
            "parallelism.data": 8, "parallelism.expert": 8, "training.micro_batch_size": 1}
    seen = []
    for topo_over in ({}, {"tiers.0.size": 4}):
        w, t = resolve("mixtral-8x7b", "dgx-h100", over, topo_over)
        moe = build_plan(w, Topology.from_config(t), bound_only=True).moe
        rows = moe.table.rows
        shared = moe.dispatcher.times(rows, 2.0, 2.0)
        private = type(rows)(*(np.array(x) if isinstance(x, np.ndarray) else x
                               for x in (rows.expert_tokens, rows.kept_tokens, rows.dropped,
                                         rows.total_assignments, rows.balance_loss,
                                         rows.topk)))
        assert private.kept_tokens.flags.writeable and not rows.kept_tokens.flags.writeable
        for x, y in zip(shared, moe.dispatcher.times(private, 2.0, 2.0), strict=True):
            np.testing.assert_array_equal(x, y)
        for kept, own in zip(moe.cost_rows(), moe.cost_rows(private), strict=True):
            for k, v in own.items():
                np.testing.assert_array_equal(kept[k], v)
        seen.append((rows, shared[0], moe))
    assert seen[0][0] is seen[1][0]  # one table
    assert (seen[1][1] > seen[0][1]).all()  # across nodes: slower
    assert seen[0][2]._cache is not seen[1][2]._cache  # priced per placement


def test_plans_alike_but_for_vp_share_their_moe_costs():
    over = {**TINY, "parallelism.tensor": 1, "parallelism.pipeline": 2, "parallelism.data": 4,
            "parallelism.expert": 4, "training.micro_batch_size": 1}
    w, t = resolve("mixtral-8x7b", "dgx-h100", over)
    w2, _ = resolve("mixtral-8x7b", "dgx-h100", {**over, "parallelism.virtual_pipeline": 2,
                                                  "parallelism.pipeline_schedule": "interleaved"})
    topo = Topology.from_config(t)
    a = build_plan(w, topo, bound_only=True).moe
    b = build_plan(w2, topo, bound_only=True).moe
    assert a.table is b.table and a._cache is b._cache and "rows" in a._cache
    a.place = topo.place(4, 8)  # elsewhere: its own costs
    assert a._cache is not b._cache and "rows" not in a._cache
