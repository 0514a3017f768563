"""Time-to-train: days, GPU-hours, interruptions, goodput, energy and cost of a whole run.

One simulated step (:func:`simulator.api.simulate_resolved` with ``variability=False``)
gives the ideal step and its breakdown; :mod:`.variability` turns it into the expected
step (throughput) and seeded percentiles; :mod:`.checkpoint` sizes the checkpoint;
:mod:`.failures` gives the interruption rate, the Young/Daly interval and Daly's expected
wall time; :mod:`.energy` the energy. Deterministic figures (everything outside
``monte_carlo`` and the two step percentiles) depend on the configuration only; the seed
moves only the Monte-Carlo ones.

>>> from simulator import time_to_train
>>> r = time_to_train("tiny", "dgx-h100", tokens=1e9, price_per_gpu_hour=2.0)
>>> r.days > 0
True
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..api import Overrides, Ref, TopologyRef, resolve, simulate_resolved
from ..config import TopologyConfig, Workload
from ..errors import ConfigError
from ..metrics import with_expected_step
from ..metrics.variability import Variability, step_distribution
from .checkpoint import Checkpoint
from .energy import MWH, it_energy_J
from .failures import (
    CAUSES,
    DAY,
    daly_interval,
    expected_wall,
    interruption_rates,
    run_rng,
    simulate_runs,
)

MAX_MC = 100_000  # Monte-Carlo runs or steps: beyond it the percentiles no longer move
MC_FIELDS = ("step_time_p50_s", "step_time_p99_s", "monte_carlo")


@dataclass(frozen=True)
class TimeToTrain:
    """A whole training run. Seconds inside; days, GPU-hours, MWh and USD where named."""

    workload: str
    topology: str
    num_gpus: int
    tokens: float
    seed: int
    step_time_ideal_s: float
    step_time_mean_s: float
    step_time_p50_s: float
    step_time_p99_s: float
    tokens_per_s: float
    days: float
    gpu_hours: float
    interruptions: float
    interruptions_by_cause: dict[str, float]
    mtbf_hours: float
    goodput: float
    breakdown_fraction: dict[str, float]
    checkpoint: dict[str, Any]
    energy_MWh: float
    it_energy_MWh: float
    price_per_gpu_hour: float | None
    cost_usd: float | None
    monte_carlo: dict[str, Any]
    # The step's memory check (as `clustersim run`): days and dollars of a plan that does
    # not fit are those of a run that cannot start, so the result says so.
    memory_per_gpu_GB: float
    fits_in_memory: bool
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """Strict JSON: an infinite figure (the MTBF and checkpoint interval of a job that
        never fails) is ``null``."""
        return json.dumps(_null_infinite(self.to_dict()), sort_keys=True, indent=2,
                          allow_nan=False)


def _null_infinite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _null_infinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_null_infinite(v) for v in obj]
    return obj


def _check(tokens: float, price: float | None, save_interval: int | None, runs: int,
           steps: int) -> None:
    if not (isinstance(tokens, int | float) and math.isfinite(tokens) and tokens > 0):
        raise ConfigError("tokens", tokens, "a finite number > 0")
    if price is not None and not (math.isfinite(price) and price >= 0):
        raise ConfigError("price_per_gpu_hour", price, "a finite number >= 0")
    if save_interval is not None and save_interval < 1:
        raise ConfigError("save_interval", save_interval, "an integer >= 1 (steps)")
    for name, value in (("mc_runs", runs), ("mc_steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) \
                or not 1 <= value <= MAX_MC:
            raise ConfigError(name, value, f"an integer from 1 to {MAX_MC:,}")


def time_to_train(workload: Ref, topology: TopologyRef, tokens: float,
                  overrides: Overrides | None = None,
                  topology_overrides: Overrides | None = None,
                  seed: int | None = None, price_per_gpu_hour: float | None = None,
                  save_interval: int | None = None, async_save: bool = False,
                  mc_runs: int = 200, mc_steps: int = 64) -> TimeToTrain:
    """Days, GPU-hours, interruptions, goodput, energy and cost to train on ``tokens``.

    Args:
        workload, topology: as :func:`simulator.simulate`.
        tokens: tokens to train on (> 0).
        overrides / topology_overrides: dotted-path overrides (``{"parallelism.data": 64}``).
        seed: root seed of the Monte-Carlo draws (default: the workload's ``training.seed``).
        price_per_gpu_hour: USD per GPU-hour; no cost without it (no hidden default).
        save_interval: steps between checkpoints (Megatron ``--save-interval``); default:
            Daly's optimum.
        async_save: asynchronous checkpointing (Megatron ``--async-save``).
        mc_runs / mc_steps: Monte-Carlo runs (failures) and steps (variability).
    """
    _check(tokens, price_per_gpu_hour, save_interval, mc_runs, mc_steps)
    w, t = resolve(workload, topology, overrides, topology_overrides, seed)
    return time_to_train_resolved(w, t, float(tokens), price_per_gpu_hour, save_interval,
                                  async_save, mc_runs, mc_steps)


def time_to_train_resolved(w: Workload, t: TopologyConfig, tokens: float,
                           price: float | None = None, save_interval: int | None = None,
                           async_save: bool = False, mc_runs: int = 200, mc_steps: int = 64
                           ) -> TimeToTrain:
    """:func:`time_to_train` on an already validated configuration."""
    result, plan, _ = simulate_resolved(w, t, variability=False)
    seed, n = w.training.seed, w.parallelism.num_gpus
    steps = step_distribution(plan.engine_input, Variability.of(w, t), seed, mc_steps,
                              ideal_s=result.step_time_s)
    tokens_per_step = w.training.global_batch_size * w.model.seq_length
    work = tokens / tokens_per_step * steps.mean_s  # seconds of failure-free training
    ckpt = Checkpoint.of(w, t, plan.stage_params, async_save)
    rates_day = interruption_rates(t, n)
    rate = sum(rates_day.values()) / DAY
    mtbf = math.inf if rate == 0 else 1.0 / rate
    restart = t.reliability.restart_s + ckpt.read_s
    if save_interval is not None:
        tau, how = save_interval * steps.mean_s, "user"
    else:
        tau, how = daly_interval(ckpt.blocking_s, mtbf), "daly"
    if async_save and ckpt.blocking_s < ckpt.write_s:
        tau = max(tau, ckpt.write_s)  # the background write must finish first
    wall = expected_wall(work, tau, ckpt.blocking_s, restart, rate)
    if not math.isfinite(wall):
        raise ConfigError("topology.reliability", f"MTBF {mtbf:.3g} s",
                          f"this job of {n} GPUs is interrupted every {mtbf:.3g} s on average "
                          f"and never completes a {tau + ckpt.blocking_s:.3g} s checkpoint "
                          "interval plus restart; lower the failure rates or the GPU count")
    n_ckpt = 0.0 if math.isinf(tau) else math.floor(work / tau)
    fails = rate * wall
    parts = _breakdown(result.breakdown_s, steps.ideal_s, steps.mean_s, work, wall,
                       n_ckpt * ckpt.blocking_s, fails * _restart_time(rate, restart))
    redone = parts["lost_work"] * result.breakdown_s["compute"] / steps.ideal_s
    compute_s = parts["compute"] + redone  # GPU-seconds at compute power
    it = it_energy_J(t, n, wall, compute_s)
    gpu_hours = n * wall / 3600.0
    return _finite(TimeToTrain(
        workload=w.model.name, topology=t.name, num_gpus=n, tokens=tokens, seed=seed,
        step_time_ideal_s=steps.ideal_s, step_time_mean_s=steps.mean_s,
        step_time_p50_s=steps.p50_s, step_time_p99_s=steps.p99_s,
        tokens_per_s=tokens_per_step / steps.mean_s, days=wall / DAY, gpu_hours=gpu_hours,
        interruptions=fails,
        interruptions_by_cause={c: fails * rates_day[c] / (rate * DAY) if rate else 0.0
                                for c in CAUSES},
        mtbf_hours=mtbf / 3600.0, goodput=work / wall,
        breakdown_fraction={k: v / wall for k, v in parts.items()},
        checkpoint={"size_GB": ckpt.bytes / 1e9, "write_s": ckpt.write_s,
                    "read_s": ckpt.read_s, "blocking_s": ckpt.blocking_s,
                    "interval_s": tau, "interval_steps": tau / steps.mean_s,
                    "interval_from": how, "async_save": async_save,
                    "overhead_fraction": n_ckpt * ckpt.blocking_s / wall},
        energy_MWh=it * t.power.pue / MWH, it_energy_MWh=it / MWH,
        price_per_gpu_hour=price, cost_usd=None if price is None else gpu_hours * price,
        monte_carlo=_monte_carlo(work, tau, ckpt.blocking_s, restart, rates_day, seed,
                                 mc_runs, steps),
        memory_per_gpu_GB=result.memory_per_gpu_GB, fits_in_memory=result.fits_in_memory,
        notes=list(result.notes)))


def _finite(r: TimeToTrain) -> TimeToTrain:
    """``r``, or a ConfigError when a figure left floating point's range (a run of 1e300
    tokens, a price of 1e300 USD): the input named, not Infinity in the JSON."""
    bad = [k for k, v in r.to_dict().items() if isinstance(v, float) and not math.isfinite(v)
           and k != "mtbf_hours"]  # infinite without failures: a true value
    bad += [f"monte_carlo.{k}" for k, v in r.monte_carlo.items()
            if isinstance(v, float) and not math.isfinite(v)]
    if not bad:
        return r
    if bad == ["cost_usd"]:
        raise ConfigError("price_per_gpu_hour", r.price_per_gpu_hour,
                          f"gives a cost beyond floating point ({r.gpu_hours:.3g} GPU-hours); "
                          "a price per GPU-hour in USD")
    raise ConfigError("tokens", r.tokens, f"gives {', '.join(bad)} beyond floating point's "
                      "range; train on fewer tokens")


def _restart_time(rate: float, restart: float) -> float:
    """Expected restart seconds per interruption (s): an interruption during a restart cuts
    it short, so an interruption costs E[min(restart, Exp(rate))] = (1 - exp(-rate R)) /
    rate, not R (Daly 2006's model; the restart fraction then never exceeds 100 %)."""
    return restart if rate * restart < 1e-12 else -math.expm1(-rate * restart) / rate


def _breakdown(step_parts: dict[str, float], ideal: float, mean: float, work: float,
               wall: float, checkpoint: float, restart: float) -> dict[str, float]:
    """Wall time (s) by where it went; sums to ``wall``."""
    steps = work / mean
    out = {"compute": step_parts["compute"] * steps, "bubble": step_parts["bubble"] * steps,
           "exposed_comm": sum(v for k, v in step_parts.items()
                               if k not in ("compute", "bubble")) * steps,
           "variability": (mean - ideal) * steps, "checkpoint": checkpoint,
           "restart": restart}
    out["lost_work"] = max(0.0, wall - sum(out.values()))
    return out


def _monte_carlo(work: float, tau: float, delta: float, restart: float,
                 rates_day: dict[str, float], seed: int, runs: int, steps) -> dict[str, Any]:
    rates = {c: r / DAY for c, r in rates_day.items()}
    draws = simulate_runs(work, tau, delta, restart, rates, run_rng(seed), runs)
    days = draws.wall_s / DAY
    return {"runs": runs, "steps": steps.samples, "days_mean": float(days.mean()),
            "days_p10": float(np.percentile(days, 10)),
            "days_p90": float(np.percentile(days, 90)),
            "interruptions_mean": float(sum(draws.interruptions.values()).mean()),
            "method": draws.method, "step_time_mc_mean_s": steps.mc_mean_s}


def simulate_with_variability(workload: Ref, topology: TopologyRef,
                              overrides: Overrides | None = None,
                              topology_overrides: Overrides | None = None,
                              seed: int | None = None, steps: int = 64):
    """:func:`simulator.simulate` with the step's variability: a :class:`~simulator.Result`
    whose ``step_time_s`` is the expected step (throughput, MFU follow it), whose
    ``breakdown_s`` gains ``variability`` (expected minus ideal step, so the parts still sum
    to the step) and whose ``step_time_p50_s`` / ``step_time_p99_s`` come from ``steps``
    seeded Monte-Carlo replays."""
    w, t = resolve(workload, topology, overrides, topology_overrides, seed)
    result, plan, _ = simulate_resolved(w, t, variability=False)
    return with_variability(result, plan.engine_input, w, t, steps)


def with_variability(result, engine_input, w: Workload, t: TopologyConfig, steps: int = 64):
    """``result`` (an ideal-step :class:`~simulator.Result`, from
    ``simulate_resolved(..., variability=False)``) with the topology's step variability
    applied (:func:`simulator.metrics.with_expected_step`: the expected step, per-second
    figures following it, ``breakdown_s["variability"]``) and ``step_time_p50_s`` /
    ``step_time_p99_s`` from ``steps`` seeded Monte-Carlo replays (seed:
    ``training.seed``)."""
    if not 1 <= steps <= 100_000:
        raise ConfigError("steps", steps, "an integer from 1 to 100000")
    d = step_distribution(engine_input, Variability.of(w, t), w.training.seed, steps,
                          ideal_s=result.step_time_s)
    return with_expected_step(result, d.mean_s, d.p50_s, d.p99_s)
