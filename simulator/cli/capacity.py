"""``clustersim capacity``: which GPU, how many, which plan, how long and at what cost.

For each (topology, GPU count) the fastest plan that fits (the plan search), its
time-to-train (failures, checkpoints, goodput, energy with the fabric's power), its
network bill of materials, and the cost at ``--price``; rows that miss ``--deadline-days``
or ``--budget`` are marked, never dropped, and ``on_frontier`` marks the cost-time Pareto
frontier (:mod:`simulator.capacity.frontier`). The one-line summary (stderr) says when no
row meets a limit; the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .common import (
    TOPOLOGY_HELP,
    add_search_space_arguments,
    check_numbers,
    emit,
    overrides,
    positive_ints,
)
from .sweep import add_executor_arguments

NAME = "capacity"
HELP = ("best plan, days, cost, energy and network bill of materials of WORKLOAD per "
        "topology and GPU count, with the cost-time frontier")
FORMATS = ("table", "json", "csv")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", nargs="?", default=None,
                   help="workload YAML path or shipped name (optional with --model-sizes)")
    p.add_argument("--tokens", default=None, help="tokens to train on (e.g. 2e12); with "
                   "--model-sizes, default: each size's compute-optimal tokens")
    p.add_argument("--topology", "-t", required=True, metavar="T1,T2,...",
                   help=TOPOLOGY_HELP.replace("topology YAML", "comma-separated topology YAML"))
    p.add_argument("--gpus", required=True, metavar="G1,G2,...", help="GPU counts to size")
    p.add_argument("--deadline-days", type=float, default=None, metavar="D",
                   help="mark the rows whose expected days are within D")
    p.add_argument("--budget", type=float, default=None, metavar="USD",
                   help="mark the rows whose cost is within USD (needs --price for each "
                        "topology)")
    p.add_argument("--price", default=None, metavar="T=USD,...",
                   help="USD per GPU-hour by topology, e.g. dgx-h100=2.5,gb200-nvl72=4.0; "
                        "a topology without a price has no cost")
    p.add_argument("--switch-price", type=float, default=None, metavar="USD",
                   help="USD per scale-out switch (with --transceiver-price): adds the "
                        "fabric's capital cost")
    p.add_argument("--transceiver-price", type=float, default=None, metavar="USD",
                   help="USD per optical transceiver (with --switch-price)")
    p.add_argument("--model-sizes", default=None, metavar="W1,W2,...",
                   help="dense workloads of one family (e.g. llama3-8b,llama3-70b,"
                        "llama3-405b), each at its compute-optimal tokens unless --tokens")
    p.add_argument("--tokens-per-param", type=float, default=20.0, metavar="R",
                   help="compute-optimal tokens per parameter for --model-sizes (default "
                        "20, Chinchilla; the Llama 3 paper's fit is ~41)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a workload field, e.g. training.global_batch_size=512")
    add_search_space_arguments(p, "1,2")
    p.add_argument("--runs", type=int, default=200, help="Monte-Carlo runs (default 200)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="output format (default: from -o's extension, else table)")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="write the result to PATH atomically (.json, .csv or .txt)")
    p.add_argument("--plot", metavar="PATH", help="also draw days against cost (the "
                   "frontier, deadline and budget) to PATH (.png or .svg)")
    add_executor_arguments(p)


def output_format(args: argparse.Namespace) -> str:
    """``--format``, else ``-o``'s extension, else table; the two must agree."""
    ext = Path(args.output).suffix.lstrip(".").lower() if args.output else ""
    named = {"json": "json", "csv": "csv", "txt": "table"}.get(ext)
    if args.format and named and named != args.format:
        raise ConfigError("-o", args.output, f"extension .{ext} does not match --format "
                          f"{args.format}")
    if args.output and not named and ext:
        raise ConfigError("-o", args.output, "extension .json, .csv or .txt (or none)")
    return args.format or named or "table"


def _tokens(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError("--tokens", text, "a number > 0 (e.g. 2e12)")
    return value


def run(args: argparse.Namespace) -> int:
    from ..capacity import capacity

    check_numbers(args, deadline_days="positive", budget="positive",
                  switch_price="positive", transceiver_price="positive",
                  max_context="positive", max_simulations="positive", runs="positive",
                  workers="positive", tokens_per_param="positive")
    fmt = output_format(args)
    if args.workload is None and not args.model_sizes:
        raise ConfigError("workload", None, "a workload name or path (or --model-sizes)")
    df = capacity(args.workload, _tokens(args.tokens), args.topology, args.gpus,
                  prices=args.price, deadline_days=args.deadline_days,
                  budget_usd=args.budget, overrides=overrides(args.set),
                  model_sizes=args.model_sizes, executor=args.executor,
                  scheduler=args.scheduler, workers=args.workers, store=args.store,
                  progress=None, switch_price=args.switch_price,
                  transceiver_price=args.transceiver_price,
                  micro_batch_sizes=positive_ints(args.micro_batch_sizes, "--micro-batch-sizes"),
                  max_context=args.max_context, max_simulations=args.max_simulations,
                  mc_runs=args.runs, tokens_per_param=args.tokens_per_param)
    print(df.attrs["summary"], file=sys.stderr)
    if args.plot:
        from ..report.capacity_plot import capacity_figure
        from ..report.figures import close, save_figure

        fig = capacity_figure(df, args.deadline_days, args.budget)
        save_figure(fig, args.plot)
        close(fig)
        print(f"wrote {args.plot}", file=sys.stderr)
    rows = records(df)
    if fmt == "json":
        emit(args, json.dumps(rows, indent=2) + "\n")
    elif fmt == "csv":
        flat = df.copy()
        flat["overrides"] = [json.dumps(o) if isinstance(o, dict) else "" for o in
                             flat["overrides"]] if "overrides" in flat else ""
        emit(args, flat.to_csv(index=False))
    else:
        from ..capacity.render import format_table

        emit(args, format_table(rows, df.attrs))
    return 0


def records(df: Any) -> list[dict[str, Any]]:
    """The table's rows as JSON-ready dicts (NaN -> None)."""
    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if hasattr(v, "item") and not isinstance(v, dict | list | str):
            return clean(v.item())
        return v

    return [{k: clean(v) for k, v in r.items()} for r in df.to_dict("records")]
