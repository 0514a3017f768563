"""``clustersim memory``: per-stage GPU memory breakdown and whether the plan fits.

It is a report: the exit status is 0 whether or not the plan fits (the verdict
line says which); configuration mistakes exit 2 through the main dispatcher.
"""

from __future__ import annotations

import argparse
import json

from ..config import Workload, load_topology, load_workload
from ..config.stacks import FSDP_NAMES, run_stack
from ..hardware import Topology
from ..memory import COMPONENTS, MemoryReport, estimate_memory
from ..memory.model import capacity_text
from ..memory.states import optimizer_states, torch_fsdp_holds_main_only
from .common import (
    add_config_arguments,
    add_format_argument,
    check_numbers,
    emit,
    output_format,
    overrides,
    workload_overrides,
)

NAME = "memory"
HELP = "Per-GPU memory of each pipeline stage (parameters, grads, optimizer, activations)."

_SHORT = {"parameters": "params", "fp8_weight_copies": "fp8cpy", "gradients": "grads",
          "optimizer": "optim", "activations": "activ", "comm_buffers": "comm",
          "framework": "frmwk"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p)
    add_format_argument(p, ("table", "json"))
    p.add_argument("--expert-load-factor", type=float, default=None, metavar="X",
                   help="MoE: routed tokens on the busiest EP rank over the uniform share "
                        "(default: the capacity factor, else the dropless hot rank's 99th "
                        "percentile over the router's draws; 1.0 if uniform)")


def run(args: argparse.Namespace) -> int:
    check_numbers(args, expert_load_factor="positive")
    w = load_workload(args.workload, workload_overrides(args))
    topo = Topology.from_config(load_topology(args.topology, overrides(args.set_topology)))
    report = estimate_memory(w, topo, expert_load_factor=args.expert_load_factor)
    if output_format(args) == "json":
        emit(args, json.dumps(to_dict(report, w.model.name, topo), indent=2) + "\n")
    else:
        emit(args, _plan_line(w) + "\n" + render_table(report, w.model.name, topo) + "\n")
    return 0


def _plan_line(w: Workload) -> str:
    par, tr = w.parallelism, w.training
    sched = par.pipeline_schedule + (f" (v={par.vp})" if par.vp > 1 else "")
    return (f"plan: TP{par.tensor} PP{par.pipeline} DP{par.data} CP{par.context} "
            f"EP{par.expert}, {sched}, {w.num_microbatches} micro-batches of "
            f"{tr.micro_batch_size}, recompute {tr.recompute_plan.describe()}\n"
            f"states: {_states_line(w)}")


def _states_line(w: Workload) -> str:
    """Precision of weights, grads and optimizer state, and offloading, in one line."""
    tr = w.training
    weights = ("fp8 (fp8_param_gather)" if tr.fp8_param_gather
               else "nvfp4 (fp4_param_gather)" if tr.fp4_param_gather else "16-bit")
    optim = "/".join((tr.main_params_dtype, *optimizer_states(tr)))
    if tr.optimizer != "adam":
        optim = f"{tr.optimizer} {optim}"
    shard = "distributed" if tr.optimizer_sharded else "replicated"
    k = tr.num_distributed_optimizer_instances
    if k > 1:
        shard += (" over all instances" if tr.outer_dp_sharding_strategy == "optim"
                  else f" in each of {k} instances, replicated across them")
    grads = "fp32" if tr.grads_in_fp32 else "bf16"
    impl = run_stack(tr).fsdp_impl
    if torch_fsdp_holds_main_only(tr, impl):  # simulator/memory/states.py
        weights = f"{tr.main_params_dtype} main copy only (PyTorch FSDP)"
        grads = tr.main_params_dtype
    text = f"{tr.precision} compute, weights {weights}, grads {grads}, optimizer {optim} ({shard})"
    if tr.use_megatron_fsdp:
        text += f", {FSDP_NAMES[impl]} {tr.sharding}" + (" (HSDP)" if k > 1 else "")
    if tr.cpu_offloading:
        text += f", {tr.cpu_offloading_num_layers} layers' activations offloaded to host"
    if tr.peft == "lora":
        frozen = "base and experts" if w.model.moe is not None else "base"
        text += (f", LoRA dim {tr.lora_dim} on {', '.join(tr.lora_target_modules)}: {frozen} "
                 f"frozen (grads and optimizer for the adapters only)")
    return text


def to_dict(report: MemoryReport, workload: str, topo: Topology) -> dict:
    """JSON-ready summary; sizes in decimal GB."""
    return {
        "workload": workload,
        "topology": topo.name,
        "gpu": topo.gpu.name,
        "capacity_GB": report.capacity_bytes / 1e9,
        "headroom_GB": report.headroom_bytes / 1e9,
        "margin_GB": report.margin_bytes / 1e9,
        "fits": report.fits,
        "worst_stage": report.worst.stage,
        "memory_per_gpu_GB": report.memory_per_gpu_GB,
        "memory_breakdown_GB": report.memory_breakdown_GB,
        "explain": report.explain(),
        "stages": [{"stage": st.stage, **st.breakdown_GB(), "total": st.total / 1e9,
                    "offloaded_to_host": st.offloaded / 1e9, "fits": report.stage_fits(st)}
                   for st in report.stages],
    }


def render_table(report: MemoryReport, workload: str, topo: Topology) -> str:
    """Fixed-width table, one row per stage, GB per component, then the verdict."""
    host = any(st.offloaded for st in report.stages)
    cols = ["stage", *(_SHORT[c] for c in COMPONENTS), "total", "fits"]
    cols += ["host"] if host else []
    lines = [f"{workload} on {topo.name} ({topo.gpu.name}, "
             f"{capacity_text(report.capacity_bytes)} per GPU), memory in GB",
             "  ".join(f"{c:>7}" for c in cols)]
    for st in report.stages:
        cells = [f"{st.stage:>7d}"] + [f"{v:>7.2f}" for v in st.breakdown_GB().values()]
        cells += [f"{st.total / 1e9:>7.2f}", f"{'yes' if report.stage_fits(st) else 'NO':>7}"]
        cells += [f"{st.offloaded / 1e9:>7.2f}"] if host else []
        lines.append("  ".join(cells))
    verdict = "FITS" if report.fits else "DOES NOT FIT"
    lines.append(f"{verdict}: {report.explain()}")
    return "\n".join(lines)
