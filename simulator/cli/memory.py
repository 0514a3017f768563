"""``clustersim memory``: per-stage GPU memory breakdown and whether the plan fits.

It is a report: the exit status is 0 whether or not the plan fits (the verdict
line says which); configuration mistakes exit 2 through the main dispatcher.
"""

from __future__ import annotations

import argparse
import json

from ..config import Workload, load_topology, load_workload
from ..hardware import Topology
from ..memory import COMPONENTS, MemoryReport, estimate_memory
from .common import (
    add_config_arguments,
    add_format_argument,
    check_numbers,
    emit,
    output_format,
    overrides,
)

NAME = "memory"
HELP = "Per-GPU memory of each pipeline stage (parameters, grads, optimizer, activations)."

_SHORT = {"parameters": "params", "gradients": "grads", "optimizer": "optim",
          "activations": "activ", "comm_buffers": "comm", "framework": "frmwk"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p)
    add_format_argument(p, ("table", "json"))
    p.add_argument("--expert-load-factor", type=float, default=1.0, metavar="X",
                   help="MoE: routed tokens on the busiest EP rank over the uniform share "
                        "(default 1.0)")


def run(args: argparse.Namespace) -> int:
    check_numbers(args, expert_load_factor="positive")
    w = load_workload(args.workload, overrides(args.set))
    topo = Topology.from_config(load_topology(args.topology, overrides(args.set_topology)))
    report = estimate_memory(w, topo, expert_load_factor=args.expert_load_factor)
    if output_format(args) == "json":
        emit(args, json.dumps(to_dict(report, w.model.name, topo), indent=2) + "\n")
    else:
        emit(args, _plan_line(w) + "\n" + render_table(report, w.model.name, topo) + "\n")
    return 0


def _plan_line(w: Workload) -> str:
    par = w.parallelism
    sched = par.pipeline_schedule + (f" (v={par.vp})" if par.vp > 1 else "")
    return (f"plan: TP{par.tensor} PP{par.pipeline} DP{par.data} CP{par.context} "
            f"EP{par.expert}, {sched}, {w.num_microbatches} micro-batches of "
            f"{w.training.micro_batch_size}, recompute {w.training.recompute}")


def to_dict(report: MemoryReport, workload: str, topo: Topology) -> dict:
    """JSON-ready summary; sizes in decimal GB."""
    return {
        "workload": workload,
        "topology": topo.name,
        "gpu": topo.gpu.name,
        "capacity_GB": report.capacity_bytes / 1e9,
        "fits": report.fits,
        "worst_stage": report.worst.stage,
        "memory_per_gpu_GB": report.memory_per_gpu_GB,
        "memory_breakdown_GB": report.memory_breakdown_GB,
        "explain": report.explain(),
        "stages": [{"stage": st.stage, **st.breakdown_GB(), "total": st.total / 1e9,
                    "fits": st.total <= report.capacity_bytes} for st in report.stages],
    }


def render_table(report: MemoryReport, workload: str, topo: Topology) -> str:
    """Fixed-width table, one row per stage, GB per component, then the verdict."""
    cols = ["stage", *(_SHORT[c] for c in COMPONENTS), "total", "fits"]
    lines = [f"{workload} on {topo.name} ({topo.gpu.name}, "
             f"{report.capacity_bytes / 1e9:.4g} GB per GPU), memory in GB",
             "  ".join(f"{c:>7}" for c in cols)]
    for st in report.stages:
        cells = [f"{st.stage:>7d}"] + [f"{v:>7.2f}" for v in st.breakdown_GB().values()]
        cells += [f"{st.total / 1e9:>7.2f}",
                  f"{'yes' if st.total <= report.capacity_bytes else 'NO':>7}"]
        lines.append("  ".join(cells))
    verdict = "FITS" if report.fits else "DOES NOT FIT"
    lines.append(f"{verdict}: {report.explain()}")
    return "\n".join(lines)
