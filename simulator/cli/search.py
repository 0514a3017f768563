"""``clustersim search``: the fastest parallel plans of a model on N GPUs, and why.

Every plan (TP, PP, VP, CP, EP, DP, micro-batch, recompute, SP, the pipeline
schedules ``--schedules`` names and the data-parallel layouts ``--sharding`` names) is
generated, checked, fitted in
memory and bounded; only plans that can still reach the top are simulated
(see :mod:`simulator.sweep.search` for the pruning and its counts). The table
ranks by tokens/s and says, for each plan, where it gains on the next one, and
for the winner, where it gains on pure DP and pure TP.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import pandas as pd

from ..config import load_topology, load_workload
from ..config.recompute import DEFAULT_MODULES
from ..config.stacks import run_stack
from ..errors import ConfigError
from ..hardware import usable_hbm_bytes
from ..sweep import SearchResult, search
from .common import (
    add_config_arguments,
    add_format_argument,
    add_search_space_arguments,
    check_numbers,
    emit,
    output_format,
    overrides,
    positive_ints,
)
from .sweep import add_executor_arguments

# Default --memory-headroom, % of usable capacity: above the memory model's median error on
# published peaks (3.7 %) and covering 9 of its 10 cases (max 16.3 %, a 2.8 GB model whose
# miss is 0.5 GB; reports/validation.md, peak_memory).
DEFAULT_HEADROOM_PCT = 10.0

NAME = "search"
HELP = "rank every parallel plan of WORKLOAD on N GPUs by simulated throughput"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, gpus=False)
    p.add_argument("--gpus", required=True, metavar="N[,N...]",
                   help="number of GPUs; several, comma-separated, search each in turn")
    p.add_argument("--top", type=int, default=10, help="plans to show (default 10)")
    add_format_argument(p, ("table", "json", "csv"))
    add_search_space_arguments(p, "1,2,4,8")
    p.add_argument("--schedules", default=None, metavar="LIST",
                   help="pipeline schedules to try: names as parallelism.pipeline_schedule "
                        "takes them, comma-separated (e.g. 1f1b,zb_h1,dualpipe), or 'all' "
                        "(default: 1f1b, interleaved when VP > 1)")
    p.add_argument("--sharding", default=None, metavar="LIST",
                   help="data-parallel layouts to try, comma-separated: ddp (Megatron DDP), "
                        "or Megatron-FSDP strategies no_shard, optim, optim_grads, "
                        "optim_grads_params; 'all' = ddp,optim_grads,optim_grads_params; "
                        "append /k for k distributed-optimizer instances (HSDP under FSDP), "
                        "e.g. ddp/4,optim_grads_params/8 (default: the workload's own)")
    p.add_argument("--memory-headroom", default=f"{DEFAULT_HEADROOM_PCT:g}%",
                   metavar="PCT%|GB",
                   help="memory each plan must leave free on its fullest GPU, as a percentage "
                        "of the usable capacity or in GB (default %(default)s: the memory "
                        "model's own error on published peaks is 3.7%% median, 16.3%% max "
                        "(10 Megatron-LM runs, reports/validation.md), so a plan predicted "
                        "to fill the GPU may not fit; 0 to rank plans to the last byte; "
                        "--set training.memory_headroom_GB=N overrides it)")
    add_executor_arguments(p)


def headroom_GB(args: argparse.Namespace) -> float | None:
    """The headroom (GB) ``--memory-headroom`` asks for, or None when ``--set
    training.memory_headroom_GB`` already says it."""
    if any(item.split("=", 1)[0].strip() == "training.memory_headroom_GB" for item in args.set):
        return None
    text = str(args.memory_headroom).strip()
    try:
        value = float(text[:-1] if text.endswith("%") else text.removesuffix("GB"))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0 and (value < 100 or not text.endswith("%"))):
        raise ConfigError("--memory-headroom", text, "a percentage of the usable capacity "
                          "from 0 to below 100 (e.g. 10%) or GB >= 0 (e.g. 4)")
    if not text.endswith("%"):
        return value
    t = load_topology(args.topology, overrides(args.set_topology))
    return value / 100.0 * usable_hbm_bytes(t.gpu.hbm_GB, t.gpu.hbm_usable_MiB) / 1e9


def run(args: argparse.Namespace) -> int:
    check_numbers(args, top="positive", max_context="positive", max_simulations="positive",
                  workers="positive")
    output_format(args)  # a bad -o is refused before the search, not after
    sets = overrides(args.set)
    head = headroom_GB(args)
    if head is not None:
        sets["training.memory_headroom_GB"] = head
    gpus = list(positive_ints(args.gpus, "--gpus"))
    results = search(args.workload, args.topology, gpus, args.top,
                    executor=args.executor, scheduler=args.scheduler, workers=args.workers,
                    store=args.store, overrides=sets,
                    topology_overrides=overrides(args.set_topology),
                    micro_batch_sizes=positive_ints(args.micro_batch_sizes, "--micro-batch-sizes"),
                    max_context=args.max_context, max_simulations=args.max_simulations,
                    schedules=args.schedules, sharding=args.sharding)
    if head is not None:  # after the search: an error stays one line
        print(f"note: plans must leave {head:.3g} GB free per GPU (--memory-headroom "
              f"{args.memory_headroom}; 0 ranks plans to the last byte)", file=sys.stderr)
    base = load_workload(args.workload, sets)
    selective = run_stack(base.training).selective_modules
    if selective != DEFAULT_MODULES:
        print(f"note: recompute 'selective' is stack {base.training.stack}'s selective "
              f"checkpointing, recompute_modules [{', '.join(selective)}]"
              + ("; not costed on this model's MoE / MLA layers, so not tried"
                 if "op_sac" in selective and (base.model.moe is not None
                                               or base.model.multi_latent_attention)
                 else ""), file=sys.stderr)
    layout = base.parallelism.pipeline_model_parallel_layout
    if layout is not None:
        print(f"note: the workload's pipeline layout {layout!r} is its own plan's; every "
              "candidate takes the simulator's split", file=sys.stderr)
    fmt = output_format(args)
    if fmt == "json":
        docs = [r.to_dict() for r in results]
        emit(args, json.dumps(docs[0] if len(docs) == 1 else docs, indent=2) + "\n")
    elif fmt == "csv":
        frames = [r.plans.assign(gpus=r.gpus) for r in results]
        emit(args, pd.concat(frames, ignore_index=True).to_csv(index=False))
    else:
        emit(args, "\n".join(format_table(r) for r in results))
    return 0


def counts_line(r: SearchResult) -> str:
    c = r.counts
    return (f"{c['plans']} plans: {c['invalid']} invalid, {c['over_memory']} over memory, "
            f"{c['recompute_dominated']} dominated by lighter recompute, "
            f"{c['pruned_by_bound']} pruned by the step-time bound, "
            f"{c['not_simulated_cap']} left by the simulation cap, {c['simulated']} simulated "
            f"in {r.elapsed_s:.1f} s"
            + ("" if r.exhaustive else " (cap reached: ranking not exhaustive)"))


def format_table(r: SearchResult) -> str:
    lines = [f"{r.workload} on {r.topology}, {r.gpus} GPUs, global batch "
             f"{r.global_batch_size}", counts_line(r), ""]
    if r.plans.empty:
        lines.append("no plan fits in memory")
    else:
        lines.append(f"{'#':>3}  {'plan':<36} {'schedule':<11} {'recompute':<9} "
                     f"{'tokens/s':>10} {'MFU':>6} "
                     f"{'mem GB':>7} {'free GB':>7} {'bubble':>7}  why")
        for row in r.plans.to_dict("records"):
            lines.append(f"{row['rank']:>3}  {row['plan']:<36} {row['schedule']:<11} "
                         f"{row['recompute']:<9} "
                         f"{row['tokens_per_s']:>10.4g} {row['mfu'] * 100:>5.1f}% "
                         f"{row['memory_per_gpu_GB']:>7.1f} {row['memory_margin_GB']:>7.1f} "
                         f"{row['bubble_fraction'] * 100:>6.1f}%  {row['why']}")
    lines += ["", "baselines:"]
    for b in r.baselines:
        head = f"  {b['name']:<8} {b['plan']:<26}"
        if b["status"] in ("ok", "over_memory"):
            tail = f"{b['recompute']:<9} {b['tokens_per_s']:>10.4g} tokens/s"
            if "why_best_wins" in b:
                tail += f"   #1: {b['why_best_wins']}"
            elif b.get("rank") == 1:
                tail += "   (this is the #1 plan)"
            lines.append(f"{head} {tail}")
        else:
            lines.append(f"{head} {b['reason']}")
    return "\n".join(lines) + "\n"
