"""``clustersim moe-balance``: watch an MoE router's load balance evolve over steps.

Follows one MoE layer of the workload through ``--steps`` training steps under
its ``model.moe.balancing`` strategy (see :mod:`simulator.moe.balancing`) and
prints max/mean expert load per step (every ``--every``-th row in the table),
then the initial and final figures. Each step routes ``--tokens`` tokens,
default ``micro_batch_size * seq_length`` (one micro-batch); more tokens only
shrink the sampling noise. ``final`` is the mean over the last tenth of the
steps, so one noisy step does not decide it.
"""

from __future__ import annotations

import argparse
import json

import pandas as pd

from ..config import load_workload
from ..errors import ConfigError
from ..moe import simulate_balancing
from .common import add_format_argument, check_numbers, emit, output_format, overrides

NAME = "moe-balance"
HELP = "simulate MoE router load balancing (none / aux loss / aux-free bias) over steps"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", help="workload YAML path or shipped name with a model.moe block")
    p.add_argument("--steps", type=int, default=200, help="training steps to simulate (200)")
    p.add_argument("--tokens", type=int, default=None,
                   help="tokens routed per step (default micro_batch_size * seq_length)")
    p.add_argument("--gamma", type=float, default=0.01,
                   help="aux_free_bias update speed in logit units (0.01)")
    p.add_argument("--seed", type=int, default=None, help="root seed (default training.seed)")
    p.add_argument("--every", type=int, default=None,
                   help="print every N-th step in the table (default steps/20)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a workload field, e.g. model.moe.router_skew=1 (repeatable)")
    add_format_argument(p, ("table", "json", "csv"))


def run(args: argparse.Namespace) -> int:
    check_numbers(args, steps="positive", tokens="positive", gamma="positive",
                  seed="nonnegative", every="positive")
    wl = load_workload(args.workload, overrides(args.set))
    moe = wl.model.moe
    if moe is None:
        raise ConfigError("model.moe", None,
                          f"workload '{wl.model.name}' has no MoE block; moe-balance needs one")
    if args.steps < 1:
        raise ConfigError("--steps", args.steps, "must be at least 1")
    tokens = args.tokens or wl.training.micro_batch_size * wl.model.seq_length
    if tokens < 1:
        raise ConfigError("--tokens", tokens, "must be at least 1")
    if args.gamma <= 0:
        raise ConfigError("--gamma", args.gamma, "must be positive")
    seed = wl.training.seed if args.seed is None else args.seed
    ep = wl.parallelism.expert
    df = simulate_balancing(moe, tokens, args.steps, seed, gamma=args.gamma, ep=ep)
    tail = df.iloc[-max(1, len(df) // 10):].drop(columns="step").mean()
    head = df.iloc[0].drop("step")
    info = {"workload": wl.model.name, "balancing": moe.balancing,
            "router_load": moe.router_load, "router_skew": moe.router_skew,
            "num_experts": moe.num_experts, "router_topk": moe.router_topk, "ep": ep,
            "capacity_factor": moe.capacity_factor, "tokens_per_step": tokens,
            "steps": args.steps, "seed": seed, "gamma": args.gamma}
    fmt = output_format(args)
    if fmt == "csv":
        emit(args, df.to_csv(index=False))
    elif fmt == "json":
        emit(args, json.dumps({**info, "initial": _floats(head), "final": _floats(tail),
                               "rows": df.to_dict(orient="records")}, indent=2) + "\n")
    else:
        emit(args, _table(info, df, head, tail, args.every or max(1, args.steps // 20)))
    return 0


def _floats(s: pd.Series) -> dict[str, float]:
    return {k: round(float(v), 6) for k, v in s.items()}


def _table(info: dict, df: pd.DataFrame, head: pd.Series, tail: pd.Series, every: int) -> str:
    cf = info["capacity_factor"]
    out = [f"{info['workload']}: {info['num_experts']} experts top-{info['router_topk']}, "
          f"EP {info['ep']}, router {info['router_load']} (skew {info['router_skew']:g}), "
          f"balancing {info['balancing']}, capacity "
          f"{'dropless' if cf is None else f'{cf:g}'}, {info['tokens_per_step']} tokens/step"]
    cols = {"max_over_mean": "expert max/mean", "rank_max_over_mean": "rank max/mean",
            "balance_loss": "balance loss", "dropped_fraction": "dropped"}
    shown = df[(df.step % every == 0) | (df.step == df.step.iloc[-1])]
    out.append(f"{'step':>6}" + "".join(f"{cols[c]:>17}" for c in cols))
    for _, row in shown.iterrows():
        out.append(f"{int(row.step):>6}" + "".join(f"{row[c]:>17.3f}" for c in cols))
    for label, s in (("initial", head), ("final", tail)):
        out.append(f"{label:>7}: " + ", ".join(f"{cols[c]} {s[c]:.3f}" for c in cols))
    return "\n".join(out) + "\n"
