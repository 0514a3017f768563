"""Router load model: capacity, balance loss, routing modes, determinism, traces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config import MoEConfig
from simulator.errors import ConfigError
from simulator.moe import (
    RouterLoads,
    apply_capacity,
    capacity,
    is_moe_layer,
    rng_for,
    route,
    switch_balance_loss,
)
from simulator.moe.sampling import inclusion_probs, topk_counts, uniform_counts

SEED_COUNTS = np.array([6, 3, 6, 14, 16, 19, 25, 39])


def moe(**kw) -> MoEConfig:
    base = {"num_experts": 8, "router_topk": 2}
    return MoEConfig(**{**base, **kw})


def test_worked_example_capacity_and_drops():
    cap = capacity(1.25, tokens=64, topk=2, num_experts=8)
    assert cap == 20
    kept, dropped = apply_capacity(SEED_COUNTS, cap)
    assert SEED_COUNTS.sum() == 128
    assert dropped == 24
    assert kept.tolist() == [6, 3, 6, 14, 16, 19, 20, 20]


def test_capacity_none_is_dropless_and_rounding_is_robust():
    assert capacity(None, 64, 2, 8) is None
    kept, dropped = apply_capacity(SEED_COUNTS, None)
    assert dropped == 0 and kept.tolist() == SEED_COUNTS.tolist()
    assert capacity(0.7, 100, 1, 1) == 70  # 0.7 * 100 is 69.999... in floating point


def test_switch_loss_is_one_when_uniform_and_rises_with_skew():
    n = 8
    uniform = np.full(n, 1 / n)
    assert switch_balance_loss(uniform, uniform) == pytest.approx(1.0)
    f = SEED_COUNTS / SEED_COUNTS.sum()
    assert switch_balance_loss(f, f) > 1.4
    losses = [route(moe(router_load="skewed", router_skew=s), 2048, rng_for(3, 0)).balance_loss
              for s in (0.0, 0.5, 1.0, 2.0)]
    assert losses[0] == pytest.approx(1.0)
    assert losses == sorted(losses) and losses[-1] > 1.5


def test_uniform_dropless_is_exact():
    loads = route(moe(num_experts=8, router_topk=2), 4096, rng_for(0))
    assert loads.expert_tokens.tolist() == [1024] * 8
    assert loads.dropped == 0 and loads.total_assignments == 8192
    assert loads.balance_loss == pytest.approx(1.0)
    assert loads.imbalance(4) == {"expert_max_over_mean": 1.0, "rank_max_over_mean": 1.0,
                                  "dropped_fraction": 0.0, "balance_loss": 1.0}


def test_uniform_counts_spreads_the_remainder():
    counts = uniform_counts(8 * 10 + 4, 8)
    assert counts.sum() == 84 and counts.max() - counts.min() == 1
    assert counts.reshape(4, 2).sum(axis=1).tolist() == [21, 21, 21, 21]  # not all on rank 0


def test_same_seed_same_loads_different_seed_different():
    m = moe(router_load="skewed", router_skew=1.0, capacity_factor=1.25)
    a = route(m, 4096, rng_for(7, 2, 5))
    b = route(m, 4096, rng_for(7, 2, 5))
    c = route(m, 4096, rng_for(8, 2, 5))
    d = route(m, 4096, rng_for(7, 2, 6))
    assert np.array_equal(a.expert_tokens, b.expert_tokens) and a.dropped == b.dropped
    assert not np.array_equal(a.expert_tokens, c.expert_tokens)
    assert not np.array_equal(a.expert_tokens, d.expert_tokens)


def test_skew_increases_imbalance():
    def mean_max(s: float) -> float:
        m = moe(router_load="skewed", router_skew=s)
        return np.mean([route(m, 4096, rng_for(1, i)).imbalance(8)["expert_max_over_mean"]
                        for i in range(20)])
    figs = [mean_max(s) for s in (0.0, 0.5, 1.0, 2.0)]
    assert figs == sorted(figs)
    assert figs[0] < 1.1 and figs[2] > 2.0


def test_topk_picks_distinct_experts():
    # with top-k == 2 of 2 experts every token must hit both: counts == tokens exactly
    counts = topk_counts(np.array([3.0, -3.0]), 500, 2, rng_for(0))
    assert counts.tolist() == [500, 500]
    # a hugely popular expert is still picked at most once per token
    counts = topk_counts(np.array([20.0, 0, 0, 0]), 300, 2, rng_for(0))
    assert counts[0] == 300 and counts.sum() == 600


def test_threshold_approximation_matches_exact_sampling():
    logits = rng_for(1).standard_normal(64) * 1.5
    exact = np.mean([topk_counts(logits, 4000, 4, rng_for(2, i)) for i in range(30)], axis=0)
    approx = inclusion_probs(logits, 4) * 4000
    assert inclusion_probs(logits, 4).sum() == pytest.approx(4)
    assert np.abs(exact - approx).max() < 0.05 * exact.max()
    big = topk_counts(logits, 100_000, 4, rng_for(3))  # above EXACT_LIMIT: approximate path
    assert big.sum() == 400_000 and big.max() <= 100_000


def test_balancing_damps_skew_in_route():
    def mean_max(balancing: str) -> float:
        m = moe(router_load="skewed", router_skew=1.0, balancing=balancing)
        return np.mean([route(m, 4096, rng_for(4, i)).imbalance(1)["expert_max_over_mean"]
                        for i in range(20)])
    none, aux, bias = mean_max("none"), mean_max("aux_loss"), mean_max("aux_free_bias")
    assert bias < aux < none
    assert bias < 1.1


@settings(max_examples=60, deadline=None)
@given(tokens=st.integers(1, 3000), experts_per_rank=st.integers(1, 8),
       ep=st.sampled_from([1, 2, 4, 8]), topk=st.integers(1, 4),
       cf=st.one_of(st.none(), st.floats(0.1, 3.0)), skew=st.floats(0.0, 3.0),
       seed=st.integers(0, 2**31))
def test_capacity_and_conservation_properties(tokens, experts_per_rank, ep, topk, cf, skew,
                                              seed):
    n = experts_per_rank * ep
    topk = min(topk, n)
    m = MoEConfig(num_experts=n, router_topk=topk, capacity_factor=cf,
                  router_load="skewed", router_skew=skew)
    loads = route(m, tokens, rng_for(seed))
    cap = capacity(cf, tokens, topk, n)
    if cap is not None:
        assert (loads.kept_tokens <= cap).all()
    else:
        assert np.array_equal(loads.kept_tokens, loads.expert_tokens)
    assert loads.expert_tokens.sum() == loads.total_assignments == tokens * topk
    assert loads.kept_tokens.sum() + loads.dropped == loads.total_assignments
    assert (loads.expert_tokens <= tokens).all()
    assert loads.per_rank(ep).sum() == loads.kept_tokens.sum()
    fig = loads.imbalance(ep)
    assert fig["expert_max_over_mean"] >= 1.0 - 1e-12 and fig["rank_max_over_mean"] >= 1.0 - 1e-12


def test_per_rank_is_contiguous_and_checks_ep():
    loads = RouterLoads(SEED_COUNTS, SEED_COUNTS, 0, 128, 1.0, 2)
    assert loads.per_rank(4).tolist() == [9, 20, 35, 64]
    with pytest.raises(ConfigError, match="must divide"):
        loads.per_rank(3)


def test_trace_replay_rescales(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("layer,expert,tokens\n" + "".join(
        f"{layer},{e},{(e + 1) * 100}\n" for layer in (0, 1) for e in range(4)))
    m = MoEConfig(num_experts=4, router_topk=2, router_load="trace", router_trace=str(path))
    loads = route(m, 1000, rng_for(0))
    assert loads.expert_tokens.tolist() == [200, 400, 600, 800]
    plain = tmp_path / "plain.csv"
    plain.write_text("expert,tokens\n0,1\n1,1\n2,1\n3,1\n")
    m = m.model_copy(update={"router_trace": str(plain)})
    assert route(m, 10, rng_for(0)).expert_tokens.tolist() == [5, 5, 5, 5]


@pytest.mark.parametrize("text, problem", [
    ("expert,count\n0,1\n", "lacks column"),
    ("expert,tokens\n", "no data rows"),
    ("expert,tokens\n0,abc\n", "line 2: tokens = 'abc' is not an integer"),
    ("expert,tokens\n0,-3\n", "negative"),
    ("expert,tokens\n9,3\n", "not below num_experts"),
    ("expert,tokens\n0,3\n0,4\n", "appears twice"),
    ("expert,tokens\n0,0\n1,0\n", "no tokens"),
])
def test_bad_trace_is_a_config_error_naming_the_file(tmp_path, text, problem):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    m = MoEConfig(num_experts=4, router_topk=2, router_load="trace", router_trace=str(path))
    with pytest.raises(ConfigError, match=problem) as err:
        route(m, 100, rng_for(0))
    assert str(path) in err.value.message()


def test_missing_trace_file(tmp_path):
    m = MoEConfig(num_experts=4, router_load="trace", router_trace=str(tmp_path / "nope.csv"))
    with pytest.raises(ConfigError, match="cannot be read"):
        route(m, 100, rng_for(0))


def test_moe_layer_placement():
    m = moe(first_k_dense=3)
    assert [is_moe_layer(m, i) for i in range(5)] == [False, False, False, True, True]
    m = moe(layer_freq=2)
    assert [is_moe_layer(m, i) for i in range(4)] == [True, False, True, False]
