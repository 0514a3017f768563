"""``clustersim time-to-train``: days, GPU-hours, interruptions, goodput, energy and cost.

A whole training run on ``--tokens`` tokens: the simulated step with its variability
(per-GPU jitter, slow nodes, host noise), failures by cause and restarts, checkpoints at
Daly's optimal interval (or ``--save-interval`` steps), energy from the topology's power
figures and cost at ``--price-per-gpu-hour`` (no cost without it).
"""

from __future__ import annotations

import argparse
import math
import sys

from ..errors import ConfigError
from ..reliability.run import MAX_MC, TimeToTrain, time_to_train
from .common import (
    add_config_arguments,
    add_format_argument,
    check_numbers,
    emit,
    output_format,
    overrides,
    workload_overrides,
)

NAME = "time-to-train"
OPTIONS = {"tokens": "--tokens", "price_per_gpu_hour": "--price-per-gpu-hour",
           "save_interval": "--save-interval", "mc_runs": "--runs", "mc_steps": "--steps",
           "seed": "--seed"}  # time_to_train's parameters, as this command spells them
HELP = "Days, GPU-hours, interruptions, goodput, energy and cost to train on N tokens."


def _tokens(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError("--tokens", text, "a number > 0 (e.g. 15e12)") from None
    if not (math.isfinite(value) and value > 0):
        raise ConfigError("--tokens", text, "a number > 0 (e.g. 15e12)")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p)
    p.add_argument("--tokens", required=True, help="tokens to train on (e.g. 15e12)")
    p.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="USD",
                   help="price per GPU-hour; cost is reported only when given")
    p.add_argument("--save-interval", type=int, default=None, metavar="STEPS",
                   help="steps between checkpoints (default: Daly's optimum)")
    p.add_argument("--async-save", action="store_true", help="asynchronous checkpointing")
    p.add_argument("--seed", type=int, default=None, help="Monte-Carlo root seed "
                   "(default: the workload's training.seed)")
    p.add_argument("--runs", type=int, default=200, help="Monte-Carlo runs (default 200)")
    p.add_argument("--steps", type=int, default=64, help="Monte-Carlo steps (default 64)")
    add_format_argument(p, ("table", "json"))


def run(args: argparse.Namespace) -> int:
    if args.seed is not None and args.seed < 0:
        raise ConfigError("--seed", args.seed, "an integer >= 0")
    check_numbers(args, price_per_gpu_hour="nonnegative")
    output_format(args)  # a bad -o is refused before the simulation
    for option, value in (("--runs", args.runs), ("--steps", args.steps)):
        if not 1 <= value <= MAX_MC:
            raise ConfigError(option, value, f"an integer from 1 to {MAX_MC:,}")
    if args.save_interval is not None and args.save_interval < 1:
        raise ConfigError("--save-interval", args.save_interval, "an integer >= 1 (steps)")
    try:
        r = time_to_train(args.workload, args.topology, _tokens(args.tokens),
                          overrides=workload_overrides(args),
                          topology_overrides=overrides(args.set_topology), seed=args.seed,
                          price_per_gpu_hour=args.price_per_gpu_hour,
                          save_interval=args.save_interval, async_save=args.async_save,
                          mc_runs=args.runs, mc_steps=args.steps)
    except ConfigError as exc:  # the API's parameter names -> this command's options
        if exc.field in OPTIONS:
            raise ConfigError(OPTIONS[exc.field], exc.value, exc.allowed, exc.source) from None
        raise
    for note in r.notes:
        print(f"note: {note}", file=sys.stderr)
    if r.monte_carlo.get("method", "exact") != "exact":
        print(f"note: Monte-Carlo {r.monte_carlo['method']}", file=sys.stderr)
    if not r.fits_in_memory and output_format(args) == "table":
        print("warning: the plan does not fit in GPU memory; these days and costs are those "
              "of a run that cannot start (see `clustersim memory`)", file=sys.stderr)
    emit(args, r.to_json() + "\n" if output_format(args) == "json" else render(r))
    return 0


def render(r: TimeToTrain) -> str:
    mc, ck = r.monte_carlo, r.checkpoint
    cost = "n/a (no --price-per-gpu-hour)" if r.cost_usd is None else f"${r.cost_usd:,.0f}"
    causes = ", ".join(f"{k} {v:.1f}" for k, v in r.interruptions_by_cause.items())
    parts = ", ".join(f"{k} {100 * v:.1f} %" for k, v in r.breakdown_fraction.items())
    lines = [
        f"{r.workload} on {r.num_gpus} GPUs ({r.topology}), {r.tokens:.3g} tokens, seed {r.seed}",
        f"step           ideal {r.step_time_ideal_s:.3f} s, mean {r.step_time_mean_s:.3f} s, "
        f"p50 {r.step_time_p50_s:.3f} s, p99 {r.step_time_p99_s:.3f} s",
        f"days           {r.days:.2f} expected (Monte-Carlo mean {mc['days_mean']:.2f}, "
        f"p10 {mc['days_p10']:.2f}, p90 {mc['days_p90']:.2f}; {mc['runs']} runs"
        + ("" if mc.get("method", "exact") == "exact" else ", approximate draws") + ")",
        f"GPU-hours      {r.gpu_hours:,.0f}",
        f"interruptions  {r.interruptions:.1f} expected (MTBF {r.mtbf_hours:.2f} h): {causes}",
        f"goodput        {100 * r.goodput:.1f} % effective training time",
        f"checkpoint     {ck['size_GB']:.1f} GB, write {ck['write_s']:.1f} s, blocking "
        f"{ck['blocking_s']:.2f} s, every {ck['interval_s']:.0f} s "
        f"({ck['interval_steps']:.1f} steps, {ck['interval_from']}), overhead "
        f"{100 * ck['overhead_fraction']:.2f} %",
        f"wall time      {parts}",
        f"energy         {r.energy_MWh:,.1f} MWh (IT {r.it_energy_MWh:,.1f} MWh)",
        f"cost           {cost}",
        f"memory         {r.memory_per_gpu_GB:.1f} GB per GPU"
        + ("" if r.fits_in_memory else " (DOES NOT FIT)"),
    ]
    return "\n".join(lines) + "\n"
