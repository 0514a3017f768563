"""The result object and its construction from a plan and an engine run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from ..config.stacks import run_stack
from ..config.workload import Workload
from ..engine import EngineResult
from ..hardware import Topology
from ..shape.model_params import model_params
from ..workload.plan import Plan
from .calibration import notes as calibration_notes
from .calibration import widen
from .flops import executed_flops_per_step, kept_fraction, model_flops_per_step
from .uncertainty import COVERAGE, DEFAULT_STACK, interval
from .uncertainty import Plan as IntervalPlan

AXES = ("tp", "cp", "ep", "pp", "dp")
CAUSAL_GAP = 0.10  # MFU over causal MFU above 1 + this: say so beside the headline


@dataclass(frozen=True)
class Result:
    """One simulated configuration. SI units: seconds, tokens/s, bytes (GB where named)."""

    workload: str
    topology: str
    num_gpus: int
    plan: dict[str, Any]
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    mfu: float
    model_tflops_per_gpu_causal: float
    hfu: float
    bubble_fraction: float
    compute_time_s: float
    optimizer_time_s: float
    exposed_comm_s: dict[str, float]
    breakdown_s: dict[str, float]
    memory_per_gpu_GB: float
    fits_in_memory: bool
    # capacity left on the worst stage after training.memory_headroom_GB (< 0: over), GB
    memory_margin_GB: float
    memory_breakdown_GB: dict[str, float]
    imbalance: dict[str, float]
    critical_stage: int
    events: int
    notes: list[str] = field(default_factory=list)
    # MFU with the attention square counted causal (half): what a causal mask leaves to
    # compute. ``mfu`` keeps the published (PaLM / Megatron) full square; where the two
    # differ by more than CAUSAL_GAP a note and the CLI print this one beside it.
    mfu_causal: float = 0.0
    model_params_total: float = 0.0  # main model, unsharded (MTP modules apart)
    model_params_active: float = 0.0  # per token (MoE: top-k routed + shared experts)
    # MoE: dispatch / combine / permute / router / expert_gemm / exposed / hidden /
    # host_stall seconds on the bottleneck stage, summed over the step (fwd + bwd).
    ep_breakdown_s: dict[str, float] = field(default_factory=dict)
    # FSDP / ZeRO-3 (sharded gradients): the bottleneck stage's FSDP seconds of the step,
    # part of breakdown_s["dp"]: exposed_collectives (the network), copy_kernels (HBM, on
    # the compute stream), overlap_slowdown (compute slowed by the collectives beside it)
    fsdp_breakdown_s: dict[str, float] = field(default_factory=dict)
    # Share of the step the bottleneck stage's GPU waits for the host to launch kernels.
    host_bound_fraction: float = 0.0
    # Cross-validated error bar (metrics/uncertainty.py): {"low", "high"}; both None when the
    # plan is far outside the validated space (a note says why).
    step_time_interval_s: dict[str, float | None] | None = None
    tokens_per_s_interval: dict[str, float | None] | None = None
    mfu_interval: dict[str, float | None] | None = None
    # the nominal rate, or None where the out-of-sample pool cannot vouch for it (a note)
    interval_coverage: float | None = COVERAGE
    interval_basis: str = ""
    # Percentiles of the step over a seeded Monte-Carlo of per-GPU jitter, slow nodes and
    # host noise (simulator.metrics.variability; `run --variability`); without that
    # Monte-Carlo both equal step_time_s.
    step_time_p50_s: float = 0.0
    step_time_p99_s: float = 0.0
    # The step with no variability at all (every GPU at its modelled speed, no host noise):
    # step_time_s is this plus breakdown_s["variability"], the expected cost of waiting for
    # the slowest peer (simulator.metrics.variability.expected_step).
    step_time_ideal_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Every field, nested dicts and lists copied: ``dataclasses.asdict`` without its
        generic walk (a sweep writes one per configuration)."""
        return {name: _copy(getattr(self, name)) for name in _FIELDS}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2)

    def to_series(self):
        """Flat pandas Series: nested dicts become ``exposed_comm_s.tp`` etc."""
        import pandas as pd

        return pd.Series(flatten(self.to_dict()))


_FIELDS = tuple(f.name for f in fields(Result))


def _copy(value: Any) -> Any:
    """A copy of the containers in a field value; numbers, strings and None as they are."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_copy(v) for v in value)
    return value


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, list):
            out[key] = "; ".join(map(str, v))
        else:
            out[key] = v
    return out


def _denoise(value: float, step: float) -> float:
    """Zero the float residue (~1e-16 of the step) that subtracting event times leaves."""
    return 0.0 if abs(value) < 1e-12 * step else float(value)


def _plan_dict(plan: Plan) -> dict[str, Any]:
    p, tr = plan.workload.parallelism, plan.workload.training
    return {
        "tp": p.tensor, "pp": p.pipeline, "dp": p.data, "cp": p.context, "ep": p.expert,
        "vp": p.vp, "sp": p.sequence_parallel, "schedule": p.pipeline_schedule,
        "mbs": tr.micro_batch_size, "gbs": tr.global_batch_size,
        "microbatches": plan.workload.num_microbatches, "recompute": tr.recompute_kind,
        "recompute_detail": tr.recompute_plan.describe(), "peft": tr.peft,
        "packed_document_length": tr.packed_document_length,
        "precision": tr.precision, "layers_per_stage": [sum(x) for x in plan.partition.layers],
        "sharding": tr.sharding, "megatron_fsdp": tr.use_megatron_fsdp,
        "optimizer_instances": tr.num_distributed_optimizer_instances,
        "stack": tr.stack, "fsdp": run_stack(tr).fsdp_impl if tr.use_megatron_fsdp else None,
    }


def kernel_peak(w: Workload, topo: Topology) -> float:
    """FLOP/s of the fastest tensor cores the simulated kernels use: the FP8 (FP4) peak in
    an FP8 (NVFP4) recipe, else the bf16 peak (fp16 GEMMs are timed at it;
    :mod:`simulator.compute`). HFU divides by it, so no kernel can be credited more than its
    hardware delivers."""
    return topo.gpu.datasheet_peak(w.training.precision_type.kernel)


def summarize(plan: Plan, run: EngineResult, memory) -> Result:
    """Build the result: critical-stage breakdown, throughput, MFU, memory, imbalance."""
    w, topo = plan.workload, plan.topo
    n = w.parallelism.num_gpus
    # The bottleneck stage (most busy time) sets the pace; its idle time is bubble.
    crit = int(np.argmax([st.busy + st.optimizer for st in run.stages]))
    st = run.stages[crit]
    exposed, bubble = _exposed_and_bubble(plan.totals[crit], st, run.step_time)
    ep = _ep_breakdown(plan, crit, st.fb_saved)
    host = ep.get("host_stall", 0.0)  # in the phase durations, neither compute nor comm
    compute = plan.totals[crit]["compute"] + st.optimizer
    step = run.step_time
    tokens = w.training.global_batch_size * w.model.seq_length
    kept = kept_fraction(plan)
    flops = model_flops_per_step(w, kept_fraction=kept)
    causal = model_flops_per_step(w, causal=True, kept_fraction=kept)
    peak = topo.gpu.datasheet_peak(w.training.precision)
    busy = [s.busy for s in run.stages]
    imbalance = {"pp": max(busy) / (sum(busy) / len(busy)) if sum(busy) > 0 else 1.0,
                 **plan.imbalance}
    params = model_params(w)
    host_bound = host / step if step > 0 else 0.0
    notes = _notes(plan, flops / causal if causal > 0 else 1.0, host_bound)
    p = w.parallelism
    moe = w.model.moe is not None
    band = interval(step, IntervalPlan(
        "moe_step_time" if moe else "dense_step_time", topo.gpu.name, w.training.precision,
        n, w.model.seq_length, w.model.moe.token_dispatcher_type if moe else "",
        p.pipeline_schedule if p.pipeline > 1 else "none",
        getattr(w.training, "stack", None) or DEFAULT_STACK))
    # uncalibrated hardware (topology `calibration` block): wider interval, a note
    low, high = widen(step, band.low, band.high, topo.interval_scale)
    ranges = _ranges(low, high, tokens, flops / (n * peak))
    return Result(
        workload=w.model.name, topology=topo.name, num_gpus=n, plan=_plan_dict(plan),
        step_time_s=step, tokens_per_s=tokens / step,
        model_tflops_per_gpu=flops / step / n / 1e12, mfu=flops / (step * n * peak),
        model_tflops_per_gpu_causal=causal / step / n / 1e12,
        mfu_causal=causal / (step * n * peak),
        hfu=executed_flops_per_step(plan) / (step * n * kernel_peak(w, topo)),
        bubble_fraction=bubble / step, compute_time_s=compute, optimizer_time_s=st.optimizer,
        exposed_comm_s=exposed,
        breakdown_s={"compute": compute, **exposed, "host": host, "bubble": bubble},
        memory_per_gpu_GB=memory.memory_per_gpu_GB, fits_in_memory=memory.fits,
        memory_margin_GB=memory.margin_bytes / 1e9,
        memory_breakdown_GB=memory.worst.breakdown_GB(), imbalance=imbalance,
        critical_stage=crit, events=run.events, step_time_p50_s=step, step_time_p99_s=step,
        step_time_ideal_s=step,
        notes=notes + ([] if memory.fits else [f"does not fit: {memory.explain()}"])
        + list(band.notes) + calibration_notes(topo.calibration_note, topo.interval_scale),
        interval_coverage=band.coverage, interval_basis=band.basis, **ranges,
        model_params_total=params.total, model_params_active=params.active,
        ep_breakdown_s=ep, host_bound_fraction=host_bound,
        fsdp_breakdown_s={k: _denoise(v, step) for k, v in plan.fsdp_breakdown[crit].items()}
        if plan.fsdp_breakdown else {},
    )


def _exposed_and_bubble(sums: dict[str, float], st, step: float
                        ) -> tuple[dict[str, float], float]:
    """The bottleneck stage's exposed communication per axis and its bubble (seconds):
    ``sums`` its phase totals, ``st`` its engine statistics."""
    dp = max(0.0, st.end - st.pipeline_end - st.optimizer)
    busy_dp = sums.get("dp", 0.0)  # Megatron-FSDP traffic exposed inside the phases
    # F&B overlap (DualPipe) hid part of the EP all-to-all the phases expose on their own
    ep = max(0.0, sums["ep"] - st.fb_saved)
    exposed = {"tp": sums["tp"], "cp": sums["cp"], "ep": ep, "pp": float(st.pp_wait),
               "dp": float(dp + busy_dp)}
    bubble = float(max(0.0, step - st.busy - st.pp_wait - dp - st.optimizer))
    return {k: _denoise(v, step) for k, v in exposed.items()}, _denoise(bubble, step)


def _notes(plan: Plan, full_over_causal: float, host_bound: float) -> list[str]:
    """The plan's notes, and the result's own: a full-square MFU more than CAUSAL_GAP above
    the causal count, a launch-bound host."""
    notes = list(plan.notes)
    if full_over_causal > 1 + CAUSAL_GAP:
        notes.append(f"MFU counts the full attention square (the published convention), "
                     f"{full_over_causal - 1:.0%} above the causal count: see mfu_causal")
    if host_bound > 0.05:
        notes.append("host launch-bound: the GPU waits for the CPU to issue kernels "
                     "(host_bound_fraction; training.cuda_graph_impl would cut launches)")
    return notes


def _ep_breakdown(plan: Plan, stage: int, fb_saved: float) -> dict[str, float]:
    """The EP breakdown of ``stage`` (seconds), with what F&B overlap (DualPipe) hid of
    its exposed all-to-all moved from ``exposed`` to ``hidden``: the phases count the
    exchange exposed on their own, the engine's F&B slot hides ``fb_saved`` of it."""
    ep = dict(plan.ep_breakdown[stage]) if plan.ep_breakdown else {}
    if ep and fb_saved > 0:
        moved = min(ep.get("exposed", 0.0), fb_saved)
        ep["exposed"] = ep.get("exposed", 0.0) - moved
        ep["hidden"] = ep.get("hidden", 0.0) + moved
    return ep


def _ranges(low: float | None, high: float | None, tokens: float, mfu_s: float
            ) -> dict[str, dict[str, float] | None]:
    """Step-time interval and the tokens/s and MFU ranges it implies (both ~ 1/step)."""
    if low is None or high is None:  # same keys, so sweep tables keep their columns
        none = {"low": None, "high": None}
        return {"step_time_interval_s": none, "tokens_per_s_interval": dict(none),
                "mfu_interval": dict(none)}
    return {"step_time_interval_s": {"low": low, "high": high},
            "tokens_per_s_interval": {"low": tokens / high, "high": tokens / low},
            "mfu_interval": {"low": mfu_s / high, "high": mfu_s / low}}


def with_expected_step(result: Result, mean_s: float, p50_s: float | None = None,
                       p99_s: float | None = None) -> Result:
    """``result`` (an ideal step: ``step_time_s == step_time_ideal_s``) with its step set to
    the expected step ``mean_s`` (s). Every per-second figure (tokens/s, TFLOP/s, MFU, HFU,
    the bubble fraction and the intervals) follows by the factor ideal / expected;
    ``breakdown_s`` gains ``variability`` (expected minus ideal), so its parts still sum to
    the step. ``p50_s`` / ``p99_s``: Monte-Carlo percentiles (s), default ``mean_s``."""
    scale = result.step_time_ideal_s / mean_s

    def band(iv: dict | None, inverse: bool) -> dict | None:
        if not iv or iv.get("low") is None:
            return iv
        f = 1 / scale if inverse else scale
        return {"low": iv["low"] * f, "high": iv["high"] * f}

    p50 = mean_s if p50_s is None else p50_s
    p99 = mean_s if p99_s is None else p99_s
    return replace(result, step_time_s=mean_s, tokens_per_s=result.tokens_per_s * scale,
                   model_tflops_per_gpu=result.model_tflops_per_gpu * scale,
                   model_tflops_per_gpu_causal=result.model_tflops_per_gpu_causal * scale,
                   mfu=result.mfu * scale, hfu=result.hfu * scale,
                   mfu_causal=result.mfu_causal * scale,
                   bubble_fraction=result.bubble_fraction * scale,
                   breakdown_s={**result.breakdown_s,
                                "variability": mean_s - result.step_time_ideal_s},
                   step_time_interval_s=band(result.step_time_interval_s, True),
                   tokens_per_s_interval=band(result.tokens_per_s_interval, False),
                   mfu_interval=band(result.mfu_interval, False),
                   step_time_p50_s=p50, step_time_p99_s=p99)
