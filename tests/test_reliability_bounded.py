"""Time-to-train's Monte-Carlo is bounded and vectorised, and agrees with Daly (issue 33.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator import ConfigError, time_to_train
from simulator.cli.main import main
from simulator.reliability import failures
from simulator.reliability.failures import expected_wall, simulate_runs, trunc_exp_moments

RATES = {"gpu": 1 / 3000.0, "node": 1 / 9000.0}  # per second: MTBF 2250 s
CASE = dict(work=2.0e5, tau=900.0, delta=30.0, restart=300.0)


def _runs(runs: int, seed: int = 7):
    return simulate_runs(**CASE, rates=RATES, rng=np.random.default_rng(seed), runs=runs)


@pytest.mark.parametrize("rate, length", [(1e-3, 50.0), (0.5, 3.0), (1e-9, 10.0), (4.0, 2.0)])
def test_truncated_exponential_moments_match_quadrature(rate, length):
    x = np.linspace(0.0, length, 400_001)
    w = rate * np.exp(-rate * x)
    z = np.trapezoid(w, x)
    mean = np.trapezoid(x * w, x) / z
    var = np.trapezoid((x - mean) ** 2 * w, x) / z
    got = trunc_exp_moments(rate, length)
    assert got[0] == pytest.approx(mean, rel=1e-6) and got[1] == pytest.approx(var, rel=1e-4)


def test_exact_draws_average_to_dalys_expected_wall():
    d = _runs(4000)
    assert d.method == "exact"
    want = expected_wall(CASE["work"], CASE["tau"], CASE["delta"], CASE["restart"],
                         sum(RATES.values()))
    se = d.wall_s.std() / math.sqrt(len(d.wall_s))
    assert abs(d.wall_s.mean() - want) < 4 * se
    n = sum(d.interruptions.values())
    assert abs(n.mean() - sum(RATES.values()) * want) < 4 * n.std() / math.sqrt(len(n))
    # causes split in proportion to their rates
    assert d.interruptions["gpu"].sum() / n.sum() == pytest.approx(0.75, abs=0.02)


def test_the_approximation_keeps_mean_and_spread(monkeypatch):
    exact = _runs(4000)
    monkeypatch.setattr(failures, "EXACT_DRAWS", 0)
    approx = _runs(4000, seed=8)
    assert approx.method.startswith("approximate")
    assert approx.wall_s.mean() == pytest.approx(exact.wall_s.mean(), rel=0.01)
    assert approx.wall_s.std() == pytest.approx(exact.wall_s.std(), rel=0.1)


def test_seeded_runs_repeat():
    assert np.array_equal(_runs(50).wall_s, _runs(50).wall_s)


def test_an_enormous_run_is_bounded_and_says_it_switched(capsys):
    r = time_to_train("tiny", "dgx-h100", 1e22, mc_runs=1, mc_steps=1)
    assert r.monte_carlo["method"].startswith("approximate")
    assert math.isfinite(r.monte_carlo["days_mean"])
    assert r.monte_carlo["days_mean"] == pytest.approx(r.days, rel=1e-3)
    assert main(["time-to-train", "tiny", "-t", "dgx-h100", "--tokens", "1e22", "--runs", "1",
                 "--steps", "1"]) == 0
    out, err = capsys.readouterr()
    assert "approximate draws" in out and "note: Monte-Carlo approximate" in err


def test_one_failure_per_gpu_day_breakdown_stays_within_the_wall():
    r = time_to_train("tiny", "dgx-h100", 1e10, mc_runs=20, mc_steps=2,
                      topology_overrides={"reliability.gpu_failures_per_gpu_day": 1.0})
    parts = r.breakdown_fraction
    assert all(0.0 <= v <= 1.0 for v in parts.values()) and sum(parts.values()) == \
        pytest.approx(1.0, rel=1e-9)


def test_a_run_that_never_finishes_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        time_to_train("tiny", "dgx-h100", 1e10, mc_runs=2, mc_steps=2,
                      topology_overrides={"reliability.gpu_failures_per_gpu_day": 1e6})
    assert err.value.field == "topology.reliability"


@pytest.mark.parametrize("option, value", [("--runs", "0"), ("--steps", "0"),
                                           ("--runs", "1000001"), ("--save-interval", "0")])
def test_cli_names_its_own_options(option, value, capsys):
    assert main(["time-to-train", "tiny", "-t", "dgx-h100", "--tokens", "1e9",
                 option, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"clustersim: error: {option} = ") and err.count("\n") == 1
    assert "mc_runs" not in err and "save_interval" not in err


def test_an_interval_longer_than_the_run_is_one_segment_in_both_models():
    """Found by the fuzz: save_interval 1e9 steps on a 1,000 GPU-day run overflowed and Daly's
    fractional segment charged a checkpoint interval longer than the run itself."""
    r = time_to_train("llama3-8b", "dgx-h100", 642065838620818.0, save_interval=10**9,
                      mc_runs=1, mc_steps=1)
    assert math.isfinite(r.days) and r.checkpoint["overhead_fraction"] == 0.0
    assert r.monte_carlo["days_mean"] == pytest.approx(r.days, rel=1e-6)
    work = 1e5
    assert expected_wall(work, 1e9, 30.0, 300.0, 1e-5) == expected_wall(work, math.inf, 30.0,
                                                                         300.0, 1e-5)


@pytest.mark.parametrize("rate, length", [(1e-8, 8e9), (1.0, 1e6)])
def test_truncated_moments_never_overflow(rate, length):
    mean, var = trunc_exp_moments(rate, length)
    assert math.isfinite(mean) and math.isfinite(var) and mean > 0 and var > 0


def test_a_cost_beyond_floating_point_names_the_price():
    """Found by the fuzz: price 1e300 USD per GPU-hour gave cost Infinity in the JSON."""
    with pytest.raises(ConfigError) as err:
        time_to_train("tiny", "dgx-h100", 1e22, price_per_gpu_hour=1e300, mc_runs=1,
                      mc_steps=1)
    assert err.value.field == "price_per_gpu_hour"


def test_cli_errors_from_the_api_use_the_option_names(capsys):
    assert main(["time-to-train", "tiny", "-t", "dgx-h100", "--tokens", "1e22", "--runs", "1",
                 "--steps", "1", "--price-per-gpu-hour", "1e300"]) == 2
    assert capsys.readouterr().err.startswith("clustersim: error: --price-per-gpu-hour = ")


def test_json_is_strict_when_nothing_ever_fails():
    """An infinite MTBF (no failures) was written as the non-JSON token Infinity."""
    import json

    ideal = {f"reliability.{k}": 0.0 for k in ("gpu_failures_per_gpu_day",
                                               "node_failures_per_node_day",
                                               "link_failures_per_gpu_day",
                                               "software_failures_per_gpu_day")}
    r = time_to_train("tiny", "dgx-h100", 1e9, topology_overrides=ideal, mc_runs=2,
                      mc_steps=2)
    assert math.isinf(r.mtbf_hours)
    doc = json.loads(r.to_json(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert doc["mtbf_hours"] is None and doc["checkpoint"]["interval_s"] is None
