"""``clustersim sensitivity``: elasticity of step time and memory to every hardware constant."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from ..api import resolve, simulate_resolved
from ..errors import ConfigError
from ..report.tornado import tornado_figure
from ..sensitivity import DEFAULT_STEP, check_only, describe, sensitivity
from .common import (
    add_config_arguments,
    add_format_argument,
    check_extension,
    emit,
    output_format,
    overrides,
    workload_overrides,
)

NAME = "sensitivity"
HELP = ("elasticity of step time and memory to each GPU and network constant "
        "(would a faster fabric help this plan?)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p)
    p.add_argument("--step", type=float, default=DEFAULT_STEP,
                   help="relative perturbation of each constant (default 0.1 = +-10 %%)")
    add_format_argument(p, ("table", "json"))
    p.add_argument("--figure", metavar="PATH", help="write the tornado figure (.png/.svg)")
    p.add_argument("--all", action="store_true", help="also list constants with no effect")
    p.add_argument("--only", action="append", default=None, metavar="PREFIX",
                   help="only constants whose path starts with PREFIX, e.g. gpu. or tiers.1 "
                   "(repeatable)")


def run(args: argparse.Namespace) -> int:
    if not 0 < args.step < 1:
        raise ConfigError("--step", args.step, "must be between 0 and 1 (a fraction, e.g. 0.1)")
    output_format(args)  # refuse a bad -o before the minutes of simulations
    if args.figure:
        check_extension(args.figure, {"png": "png", "svg": "svg"}, "--figure")
    w, t = resolve(args.workload, args.topology, workload_overrides(args),
                   overrides(args.set_topology))
    check_only(t, args.only, "--only")
    base = simulate_resolved(w, t)[0]
    rows = sensitivity(w, t, None, None, args.step, args.only)
    if args.figure:
        title = (f"Sensitivity: {base.workload} on {base.topology}, {base.num_gpus} GPUs")
        tornado_figure(rows, base.step_time_s, title, args.figure, args.step,
                       labels={r.name: describe(r.name, t) for r in rows})
    if output_format(args) == "json":
        doc = {"workload": base.workload, "topology": base.topology,
               "step_time_s": base.step_time_s, "memory_per_gpu_GB": base.memory_per_gpu_GB,
               "step": args.step, "constants": [asdict(r) for r in rows]}
        emit(args, json.dumps(doc, indent=2) + "\n")
        return 0
    emit(args, format_table(rows, base, t, args.all))
    return 0


def format_table(rows, base, t, show_all: bool = False) -> str:
    lines = [f"{base.workload} on {base.topology}: step time {base.step_time_s:.3f} s, "
             f"memory {base.memory_per_gpu_GB:.1f} GB per GPU", "",
             "  elasticity = % change of the output per % change of the constant",
             f"  {'constant':<34}{'value':>10}{'step time':>11}{'memory':>9}"]
    quiet = 0
    for r in rows:
        if not show_all and abs(r.step_time) < 5e-4 and abs(r.memory) < 5e-4:
            quiet += 1
            continue
        lines.append(f"  {describe(r.name, t):<34}{r.value:>10.4g}{r.step_time:>+11.3f}"
                     f"{r.memory:>+9.3f}")
    if quiet:
        lines.append(f"  ({quiet} constants with no effect on this plan; --all lists them)")
    return "\n".join(lines) + "\n"
