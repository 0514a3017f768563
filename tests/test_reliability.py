"""Time-to-train: closed forms, determinism, monotonicity and bad input (issue #14)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from simulator import ConfigError, simulate, time_to_train
from simulator.api import resolve, simulate_resolved
from simulator.cli.main import main
from simulator.config.loader import read_document
from simulator.engine import run_engine
from simulator.metrics.variability import (
    Variability,
    expected_max_lognormal,
    expected_step,
    harmonic,
    max_exponential,
    perturb,
    sample_steps,
)
from simulator.reliability.failures import (
    daly_interval,
    expected_wall,
    interruption_rates,
    young_interval,
)
from simulator.reliability.run import MC_FIELDS

IDEAL = {"reliability.jitter_sigma": 0.0, "reliability.sync_noise_s": 0.0,
         "reliability.host_noise_s": 0.0, "reliability.gpu_failures_per_gpu_day": 0.0,
         "reliability.node_failures_per_node_day": 0.0,
         "reliability.link_failures_per_gpu_day": 0.0,
         "reliability.software_failures_per_gpu_day": 0.0}
FAST = {"mc_runs": 20, "mc_steps": 4}


def test_ideal_cluster_takes_tokens_over_throughput_exactly():
    r = time_to_train("tiny", "dgx-h100", 1e9, topology_overrides=IDEAL, **FAST)
    step = simulate("tiny", "dgx-h100", variability=False).step_time_s
    assert simulate("tiny", "dgx-h100", topology_overrides=IDEAL).step_time_s == step
    tokens_per_step = r.tokens_per_s * step
    assert r.step_time_mean_s == step and r.step_time_p99_s == step
    assert r.days == 1e9 / tokens_per_step * step / 86400
    assert r.goodput == 1.0 and r.interruptions == 0.0
    assert r.monte_carlo["days_p10"] == r.monte_carlo["days_p90"] == r.days


def test_zero_variability_replays_the_engine_bit_for_bit():
    w, t = resolve("tiny", "dgx-h100", {}, IDEAL)
    _, plan, run = simulate_resolved(w, t)
    v = Variability.of(w, t)
    assert v.zero
    assert expected_step(plan.engine_input, v) == run.step_time
    assert (sample_steps(plan.engine_input, v, 0, 3) == run.step_time).all()


def test_expected_maximum_of_lognormals_matches_sampling():
    rng = np.random.default_rng(3)
    for n in (1, 8, 512):
        sampled = np.exp(0.03 * rng.standard_normal((4000, n))).max(axis=1).mean()
        assert expected_max_lognormal(0.03, n) == pytest.approx(sampled, rel=2e-3)
    assert harmonic(4) == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4, rel=1e-15)


def test_step_grows_with_peer_count():
    def over(d):
        return {"parallelism.data": d, "training.global_batch_size": 2 * d}
    steps = [time_to_train("tiny", "dgx-h100", 1e9, overrides=over(d), **FAST).step_time_mean_s
             / simulate("tiny", "dgx-h100", variability=False, **over(d)).step_time_s
             for d in (1, 8, 64)]
    assert steps[0] < steps[1] < steps[2]
    # the plain simulated step is that expected step
    assert [simulate("tiny", "dgx-h100", **over(d)).step_time_s
            / simulate("tiny", "dgx-h100", variability=False, **over(d)).step_time_s
            for d in (1, 8, 64)] == pytest.approx(steps, rel=1e-12)


def test_young_daly_formulas():
    d, m = 30.0, 3 * 3600.0
    assert young_interval(d, m) == math.sqrt(2 * d * m)
    x = d / (2 * m)
    assert daly_interval(d, m) == math.sqrt(2 * d * m) * (1 + math.sqrt(x) / 3 + x / 9) - d
    assert daly_interval(3 * m, m) == m
    assert math.isinf(daly_interval(d, math.inf))
    # Daly's optimum minimises his expected wall time (to grid resolution)
    taus = np.linspace(200, 2000, 1801)
    walls = [expected_wall(1e6, tau, d, 600, 1 / m) for tau in taus]
    assert abs(taus[int(np.argmin(walls))] - daly_interval(d, m)) < 15


def test_more_failures_never_shorten_training():
    days = []
    for scale in (0.0, 0.5, 1.0, 2.0, 8.0):
        over = {"reliability.gpu_failures_per_gpu_day": 3e-4 * scale,
                "reliability.software_failures_per_gpu_day": 1e-4 * scale}
        r = time_to_train("tiny", "dgx-h100", 1e11, topology_overrides=over, **FAST)
        days.append(r.days)
    assert days == sorted(days) and days[0] < days[-1]
    for tau in (60.0, 600.0, math.inf):
        walls = [expected_wall(1e6, tau, 10, 300, lam) for lam in (0, 1e-5, 1e-4, 1e-3)]
        assert walls == sorted(walls)


def test_seeded_runs_repeat_and_the_seed_moves_only_monte_carlo_figures():
    a = time_to_train("tiny", "dgx-h100", 1e11, seed=1, **FAST).to_json()
    assert time_to_train("tiny", "dgx-h100", 1e11, seed=1, **FAST).to_json() == a
    d1 = time_to_train("tiny", "dgx-h100", 1e11, seed=1, **FAST).to_dict()
    d2 = time_to_train("tiny", "dgx-h100", 1e11, seed=2, **FAST).to_dict()
    fixed = [k for k in d1 if k not in MC_FIELDS and k != "seed"]
    assert {k: d1[k] for k in fixed} == {k: d2[k] for k in fixed}
    assert d1["monte_carlo"] != d2["monte_carlo"]


# Llama 3 (Meta 2024, Sec. 3.3.4, Table 5): unexpected interruptions of Llama 3 405B
# pre-training on 16,384 H100 over 54 days, by the cause groups of topologies/dgx-h100.yaml.
LLAMA3_TABLE5 = {"gpu": 268, "node": 46, "link": 42, "software": 63}  # 419 in all


def test_llama3_405b_on_16k_h100_turns_rates_into_counts_as_the_table_does():
    """Consistency, not validation: the H100 failure rates were *derived* from this table
    (topologies/dgx-h100.yaml sources), so reproducing its 419 says nothing about the model.
    What is checked is the arithmetic from rates to counts, on the table's scale and on
    another one: expected interruptions = sum of the per-cause rates x units x wall days,
    by cause, exactly; on 16,384 GPUs for 54 days that is the table's cause counts to the
    rounding of the four constants (4 significant digits)."""
    base = time_to_train("llama3-405b", "dgx-h100", 1e12, mc_runs=5, mc_steps=2)
    r = time_to_train("llama3-405b", "dgx-h100", 1e12 * 54 / base.days, mc_runs=5,
                      mc_steps=2)
    _, t = resolve("llama3-405b", "dgx-h100")
    rates = interruption_rates(t, r.num_gpus)
    assert r.num_gpus == 16384
    assert r.interruptions == pytest.approx(sum(rates.values()) * r.days, rel=1e-9)
    for cause, count in LLAMA3_TABLE5.items():
        assert r.interruptions_by_cause[cause] == pytest.approx(rates[cause] * r.days,
                                                                rel=1e-9)
        assert rates[cause] * 54 == pytest.approx(count, rel=2e-3), cause
    # another scale: GPU, link and software causes scale with GPUs, host causes with nodes
    small = interruption_rates(t, 2048)
    for cause in ("gpu", "link", "software"):
        assert small[cause] == pytest.approx(rates[cause] / 8, rel=1e-12)
    assert small["node"] == pytest.approx(rates["node"] / 8, rel=1e-12)  # 256 of 2,048 nodes
    assert sum(r.breakdown_fraction.values()) == pytest.approx(1.0, rel=1e-12)
    assert 1e3 < r.checkpoint["size_GB"] < 1e4  # 405e9 x 14 B = 5.7 TB


@pytest.mark.parametrize("kwargs, field", [
    ({"tokens": 0}, "tokens"), ({"tokens": -5}, "tokens"), ({"tokens": float("nan")}, "tokens"),
    ({"tokens": 1e9, "price_per_gpu_hour": float("nan")}, "price_per_gpu_hour"),
    ({"tokens": 1e9, "save_interval": 0}, "save_interval"),
])
def test_bad_input_is_a_config_error(kwargs, field):
    with pytest.raises(ConfigError) as exc:
        time_to_train("tiny", "dgx-h100", **kwargs)
    assert exc.value.field == field


def test_negative_rate_is_rejected():
    with pytest.raises(ConfigError):
        time_to_train("tiny", "dgx-h100", 1e9,
                      topology_overrides={"reliability.node_failures_per_node_day": -1})


@pytest.mark.parametrize("args", [["--tokens", "0"], ["--tokens", "1e9", "--price-per-gpu-hour",
                                                      "nan"],
                                  ["--tokens", "1e9", "--set-topology",
                                   "reliability.link_failures_per_gpu_day=-0.1"]])
def test_cli_bad_input_one_line_exit_2(args, capsys):
    assert main(["time-to-train", "tiny", "-t", "dgx-h100", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1


def test_cli_json_and_output_file(tmp_path):
    out = tmp_path / "ttt.json"
    assert main(["time-to-train", "tiny", "-t", "dgx-h100", "--tokens", "1e10", "--format",
                 "json", "--runs", "5", "--steps", "2", "--price-per-gpu-hour", "2.5",
                 "-o", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["cost_usd"] == pytest.approx(d["gpu_hours"] * 2.5, rel=1e-12)
    assert d["energy_MWh"] == pytest.approx(d["it_energy_MWh"] * 1.2, rel=1e-12)


def test_time_to_train_says_when_the_plan_does_not_fit(capsys):
    """Days and dollars of a plan that cannot start are flagged, in Python and on the CLI."""
    ok = time_to_train("tiny", "dgx-h100", 1e10, **FAST)
    assert ok.fits_in_memory and 0 < ok.memory_per_gpu_GB < 85.52
    assert ok.memory_per_gpu_GB == simulate("tiny", "dgx-h100").memory_per_gpu_GB
    big = {"training.micro_batch_size": 8, "model.seq_length": 262144}
    r = time_to_train("tiny", "dgx-h100", 1e10, overrides=big, **FAST)
    assert not r.fits_in_memory and r.memory_per_gpu_GB > 85.52
    assert any(n.startswith("does not fit") for n in r.notes)
    sets = [a for k, v in big.items() for a in ("--set", f"{k}={v}")]
    assert main(["time-to-train", "tiny", "-t", "dgx-h100", "--tokens", "1e10", "--runs", "5",
                 "--steps", "2", *sets]) == 0
    out, err = capsys.readouterr()
    assert "DOES NOT FIT" in out and "warning: the plan does not fit" in err


def test_plain_simulate_keeps_its_step():
    r = simulate("tiny", "dgx-h100")
    assert r.step_time_p50_s == r.step_time_p99_s == r.step_time_s


def test_sweep_reports_days_and_dollars():
    from simulator import sweep
    df = sweep("tiny", "dgx-h100", executor="serial",
               axes={"topology.reliability.gpu_failures_per_gpu_day": [0.0, 3e-2]},
               time_to_train={"tokens": 1e11, "price_per_gpu_hour": 2.0, "mc_runs": 5,
                              "mc_steps": 2})
    days = df["time_to_train.days"].tolist()
    assert days[0] < days[1]
    # the step's memory check is the row's own, not repeated under time_to_train.
    assert "fits_in_memory" in df and "time_to_train.fits_in_memory" not in df
    assert (df["time_to_train.cost_usd"] == df["time_to_train.gpu_hours"] * 2.0).all()
    with pytest.raises(ConfigError):
        sweep("tiny", "dgx-h100", executor="serial", time_to_train={"tokens": float("nan")})


def test_user_interval_and_async_save():
    user = time_to_train("tiny", "dgx-h100", 1e11, save_interval=1000, **FAST)
    assert user.checkpoint["interval_from"] == "user"
    assert user.checkpoint["interval_s"] == 1000 * user.step_time_mean_s
    sync = time_to_train("llama3-405b", "dgx-h100", 1e12, mc_runs=2, mc_steps=1)
    asyn = time_to_train("llama3-405b", "dgx-h100", 1e12, async_save=True, mc_runs=2,
                         mc_steps=1)
    assert asyn.checkpoint["blocking_s"] < sync.checkpoint["blocking_s"]
    assert asyn.days <= sync.days


def test_simulate_with_variability_keeps_the_breakdown_summing_to_the_step():
    from simulator.reliability.run import simulate_with_variability
    plain = simulate("tiny", "dgx-h100", variability=False)
    r = simulate_with_variability("tiny", "dgx-h100", steps=8)
    assert r.step_time_s > plain.step_time_s
    expected = simulate("tiny", "dgx-h100")  # the same expected step, without percentiles
    assert expected.step_time_s == r.step_time_s and expected.breakdown_s == r.breakdown_s
    assert expected.step_time_p50_s == expected.step_time_p99_s == expected.step_time_s
    assert r.step_time_ideal_s == expected.step_time_ideal_s == plain.step_time_s
    assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-12)
    assert r.step_time_p50_s <= r.step_time_p99_s
    assert r.tokens_per_s * r.step_time_s == pytest.approx(plain.tokens_per_s * plain.step_time_s)
    ideal = simulate_with_variability("tiny", "dgx-h100", topology_overrides=IDEAL, steps=2)
    assert ideal.step_time_s == plain.step_time_s


def test_slow_nodes_slow_the_step_by_their_probability():
    over = {**IDEAL, "reliability.slow_node_fraction": 0.01,
            "reliability.slow_node_slowdown": 0.2}
    w, t = resolve("tiny", "dgx-h100", {"parallelism.data": 16,
                                        "training.global_batch_size": 32}, over)
    _, plan, run = simulate_resolved(w, t)
    v = Variability.of(w, t)
    p_any = 1 - 0.99 ** v.job_nodes
    inp = plan.engine_input
    stage = np.full(inp.fwd.shape[0], 1.2)
    slow = run_engine(perturb(inp, np.full(inp.fwd.shape, 1.2), np.full(inp.bwd.shape, 1.2),
                              stage)).step_time
    assert slow > run.step_time
    assert expected_step(inp, v) == pytest.approx((1 - p_any) * run.step_time + p_any * slow,
                                                  rel=1e-12)
    draws = sample_steps(plan.engine_input, v, 0, 200)
    assert draws.min() == pytest.approx(run.step_time, rel=1e-12)
    assert draws.max() > run.step_time * 1.1


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "gb200-nvl72"])
def test_every_run_level_constant_has_a_source(name):
    data = read_document(name, "topologies")[0]
    for section in ("reliability", "storage", "power"):
        block = data[section]
        missing = set(block) - {"sources"} - set(block["sources"])
        assert not missing, (section, sorted(missing))


def test_run_variability_flag_scales_every_rate_by_the_expected_step(capsys):
    assert main(["run", "tiny", "-t", "dgx-h100", "--format", "json", "--ideal"]) == 0
    ideal = json.loads(capsys.readouterr().out)
    assert "variability" not in ideal["breakdown_s"]
    assert ideal["step_time_s"] == ideal["step_time_ideal_s"]
    assert main(["run", "tiny", "-t", "dgx-h100", "--format", "json", "--variability",
                 "--steps", "16"]) == 0
    noisy = json.loads(capsys.readouterr().out)
    ratio = ideal["step_time_s"] / noisy["step_time_s"]
    assert ratio < 1  # jitter and host noise only ever delay a synchronising step
    for key in ("tokens_per_s", "model_tflops_per_gpu", "model_tflops_per_gpu_causal", "mfu",
                "hfu"):
        assert noisy[key] == pytest.approx(ideal[key] * ratio, rel=1e-12)
    iv, iv0 = noisy["step_time_interval_s"], ideal["step_time_interval_s"]
    if iv0["low"] is not None:
        assert iv["low"] == pytest.approx(iv0["low"] / ratio, rel=1e-12)
    assert sum(noisy["breakdown_s"].values()) == pytest.approx(noisy["step_time_s"], rel=1e-9)
    assert noisy["step_time_p50_s"] <= noisy["step_time_p99_s"]
    assert main(["run", "tiny", "-t", "dgx-h100", "--variability"]) == 0
    assert "p50 / p99" in capsys.readouterr().out
    assert main(["run", "tiny", "-t", "dgx-h100", "--format", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)  # the expected step, no percentiles drawn
    assert plain["step_time_s"] == noisy["step_time_s"]
    assert plain["step_time_p50_s"] == plain["step_time_p99_s"] == plain["step_time_s"]
    assert main(["run", "tiny", "-t", "dgx-h100"]) == 0
    table = capsys.readouterr().out
    assert "ideal step" in table and "p50 / p99" not in table


FP8_PP1 = {"training.precision": "fp8", "parallelism.pipeline": 1, "parallelism.data": 2}


def _barrier_case(extra: dict, noise: float = 1e-3):
    quiet = {**IDEAL, "reliability.sync_noise_s": noise}
    w, t = resolve("tiny", "dgx-h100", {**FP8_PP1, **extra}, quiet)
    _, plan, run = simulate_resolved(w, t)
    return plan.engine_input, Variability.of(w, t), run.step_time


def test_fp8_delayed_scaling_waits_at_every_phase_barrier():
    # One stage, two micro-batches: four phases in a row, each closed by the amax
    # all-reduce of TP 2 x DP 2 = 4 GPUs; the TP pair arrives together from its last TP
    # collective, so each phase waits for the last of 2 exponentials (the DP replicas).
    inp, v, ideal = _barrier_case({})
    assert v.barrier_peers == 2 and inp.fwd.size + inp.bwd.size == 4
    assert expected_step(inp, v) == pytest.approx(ideal + 4 * 1e-3 * harmonic(2), rel=1e-12)


@pytest.mark.parametrize("extra, peers", [
    ({"training.precision": "bf16"}, 1),
    ({"training.fp8_recipe": "tensorwise"}, 1),
    ({"training.fp8_recipe": "mxfp8"}, 1),
    ({"training.tp_only_amax_red": True}, 1),  # TP 2 x CP 1: one arrival, no wait
    ({"parallelism.data": 4}, 4),
])
def test_only_delayed_scaling_over_the_data_parallel_group_is_a_job_wide_barrier(extra, peers):
    inp, v, ideal = _barrier_case(extra)
    assert v.barrier_peers == peers
    phases = inp.fwd.size + inp.bwd.size  # one stage: the phases run back to back
    expected = ideal + phases * 1e-3 * harmonic(peers) if peers > 1 else ideal
    assert expected_step(inp, v) == pytest.approx(expected, rel=1e-12)


def test_barrier_draws_average_to_the_closed_form():
    u = np.random.default_rng(5).random(200_000)
    for n in (1, 16, 256):
        assert max_exponential(2e-4, n, u).mean() == pytest.approx(2e-4 * harmonic(n), rel=1e-2)
    inp, v, _ = _barrier_case({})
    draws = sample_steps(inp, v, 0, 400)
    assert draws.mean() == pytest.approx(expected_step(inp, v), rel=2e-2)
    assert (sample_steps(inp, v, 0, 400) == draws).all()
