"""``clustersim run``: simulate one training step and print the result."""

from __future__ import annotations

import argparse
import sys

from ..api import resolve
from ..config.stacks import FSDP_NAMES
from ..metrics import CAUSAL_GAP, Result
from ..reliability.result import json_text, run_result
from .common import (
    add_config_arguments,
    add_format_argument,
    emit,
    output_format,
    overrides,
    workload_overrides,
)

NAME = "run"
# simulator.workload.fsdp.FSDP_KEYS, as the table prints them
FSDP_LABELS = {"exposed_collectives": "collectives exposed", "copy_kernels": "copy kernels",
               "overlap_slowdown": "overlap slowdown"}
HELP = "simulate one training step of WORKLOAD on a topology"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p)
    add_format_argument(p, ("table", "json"))
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--variability", action="store_true",
                      help="also draw the step's percentiles: p50/p99 over seeded replays of "
                           "the topology's step variability (per-GPU jitter, slow nodes, host "
                           "noise; its `reliability` section). The step itself is always the "
                           "expected step over the job's ranks")
    mode.add_argument("--ideal", action="store_true",
                      help="the ideal step: every GPU at its modelled speed, no wait for the "
                           "slowest peer and no host noise (faster than any real step)")
    p.add_argument("--steps", type=int, default=64, metavar="N",
                   help="Monte-Carlo steps for --variability's p50/p99 (default 64; seed: "
                        "training.seed)")


def run(args: argparse.Namespace) -> int:
    w, t = resolve(args.workload, args.topology, workload_overrides(args),
                   overrides(args.set_topology))
    result = run_result(w, t, args.ideal, args.variability, args.steps)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    fmt = output_format(args)
    if not result.fits_in_memory and fmt == "table":
        print("warning: the plan does not fit in GPU memory; its timing assumes it did "
              "(see `clustersim memory`)", file=sys.stderr)
    emit(args, json_text(result) if fmt == "json" else format_table(result))
    return 0


def _ms(x: float) -> str:
    return f"{x * 1e3:10.1f} ms"


def _causal(r: Result) -> str:
    """The causal MFU beside the headline where the conventions differ by > CAUSAL_GAP."""
    if r.mfu_causal > 0 and r.mfu / r.mfu_causal > 1 + CAUSAL_GAP:
        return f"  (causal attention: {r.mfu_causal * 100:.1f} %)"
    return ""


def _band(r: Result) -> str:
    """' (14.9-16.2 s, 80 %)': the out-of-sample interval ('coverage unknown' outside the
    validated space), or nothing (a note says why)."""
    iv = r.step_time_interval_s
    if not iv or iv["low"] is None:
        return ""
    cov = "coverage unknown" if r.interval_coverage is None \
        else f"{r.interval_coverage * 100:.0f} %"
    return f"  ({iv['low']:#.3g}-{iv['high']:#.3g} s, {cov})"


def _instances(plan: dict) -> str:
    """", optimizer in k instances" (Megatron-Core's partial distributed optimizer; HSDP
    under Megatron-FSDP), or nothing with one instance."""
    k = plan.get("optimizer_instances", 1)
    if k <= 1:
        return ""
    return f", {'HSDP' if plan.get('megatron_fsdp') else 'distributed optimizer'} in {k} instances"



def format_table(r: Result) -> str:
    p = r.plan
    lines = [
        f"{r.workload} on {r.topology}: {r.num_gpus} GPUs, TP{p['tp']} PP{p['pp']} "
        f"DP{p['dp']} CP{p['cp']} EP{p['ep']}"
        + (f" VP{p['vp']}" if p["vp"] > 1 else "")
        + f", {p['schedule']}, MBS {p['mbs']}, GBS {p['gbs']} ({p['microbatches']} micro-batches)"
        f", recompute {p.get('recompute_detail') or p['recompute']}, {p['precision']}"
        + (", LoRA" if p.get("peft") == "lora" else "")
        + (f", packed documents of {p['packed_document_length']:g} tokens"
           if p.get("packed_document_length") else "")
        + (f", {FSDP_NAMES.get(p.get('fsdp') or 'megatron_fsdp', p.get('fsdp'))} {p['sharding']}"
           if p.get("megatron_fsdp") else "")
        + (f", stack {p['stack']}" if p.get("stack", "megatron") != "megatron" else "")
        + _instances(p),
        "",
        f"  step time          {r.step_time_s:10.3f} s{_band(r)}",
        *([f"  ideal step         {r.step_time_ideal_s:10.3f} s  (no wait for slow peers, "
           "no host noise)"] if "variability" in r.breakdown_s else []),
        *([f"  step p50 / p99     {r.step_time_p50_s:10.3f} / {r.step_time_p99_s:.3f} s  "
           "(variability: seeded replays)"]
          if (r.step_time_p50_s, r.step_time_p99_s) != (r.step_time_s,) * 2 else []),
        f"  throughput         {r.tokens_per_s:10.4g} tokens/s",
        f"  model TFLOP/s/GPU  {r.model_tflops_per_gpu:10.1f}",
        f"  causal TFLOP/s/GPU {r.model_tflops_per_gpu_causal:10.1f}",
        f"  MFU                {r.mfu * 100:10.1f} %" + _causal(r),
        f"  HFU                {r.hfu * 100:10.1f} %  (FLOPs executed, recompute included)",
        f"  bubble             {r.bubble_fraction * 100:10.1f} %",
        f"  memory per GPU     {r.memory_per_gpu_GB:10.1f} GB "
        f"({'fits' if r.fits_in_memory else 'DOES NOT FIT'})",
        f"  parameters         {r.model_params_total / 1e9:10.1f} B total, "
        f"{r.model_params_active / 1e9:.1f} B active",
        "",
        f"  where the time goes (bottleneck stage {r.critical_stage}):",
    ]
    for key, val in r.breakdown_s.items():
        share = val / r.step_time_s * 100 if r.step_time_s else 0.0
        label = key if key in ("compute", "bubble", "variability") else f"exposed {key} comm"
        if key == "host":
            if not val:
                continue
            label = "host launch stall"
        lines.append(f"    {label:<18}{_ms(val)}  {share:5.1f} %")
    if r.ep_breakdown_s:
        lines += ["", f"  expert parallelism (bottleneck stage, whole step; host-bound "
                      f"{r.host_bound_fraction * 100:.1f} % of the step):"]
        for key, val in r.ep_breakdown_s.items():
            lines.append(f"    {key.replace('_', ' '):<18}{_ms(val)}")
    if r.fsdp_breakdown_s:
        lines += ["", "  FSDP (bottleneck stage, whole step; part of the exposed dp time):"]
        for key, val in r.fsdp_breakdown_s.items():
            lines.append(f"    {FSDP_LABELS.get(key, key):<22}{_ms(val)}")
    if len(r.imbalance) > 1 or r.imbalance.get("pp", 1.0) > 1.001:
        lines.append("")
        lines.append("  imbalance (max/mean): " + ", ".join(
            f"{k} {v:.3f}" for k, v in sorted(r.imbalance.items())))
    return "\n".join(lines) + "\n"
