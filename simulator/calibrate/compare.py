"""What the calibrated file predicts beside what was measured: traces per op kind, intervals.

Simulated kernel time per op kind comes from the simulator's own Chrome trace of the run
(:func:`simulator.report.trace.chrome_trace`), first pipeline stage, one step: compute
kernels with FLOPs are ``gemm`` (``attention`` when the op is the attention core), without
FLOPs ``memory`` (as is the optimizer step); TP / CP / EP / PP / DP slices are ``comm``.
"""

from __future__ import annotations

import math
from typing import Any

from ..metrics.uncertainty import COVERAGE
from .fit import StageFit
from .kineto import KINDS
from .measurements import StepRun, TraceProfile

COMM_CATS = {"tp", "cp", "ep", "pp", "dp"}


def conformal_q(errors: list[float], coverage: float = COVERAGE) -> float:
    """Split-conformal half-width in log space of the relative errors ``errors``: the
    ceil((n + 1) * coverage)-th smallest |log(1 + e)| (Vovk et al. 2005; capped at the largest)."""
    r = sorted(abs(math.log1p(e)) for e in errors)
    k = math.ceil((len(r) + 1) * coverage)
    return r[min(k, len(r)) - 1]


def simulated_kinds(workload: str, overrides: dict, doc: dict) -> dict[str, float]:
    """Seconds per op kind on stage 0 in one simulated step of ``workload`` on ``doc``."""
    from ..api import resolve, simulate_resolved
    from ..report.trace import chrome_trace

    w, t = resolve(workload, doc, overrides)
    _, plan, run = simulate_resolved(w, t, keep_records=True, variability=False)
    out = dict.fromkeys(KINDS, 0.0)
    for e in chrome_trace(plan, run)["traceEvents"]:
        if e.get("ph") != "X" or e.get("pid") != 1:
            continue
        cat, dur = e.get("cat"), e.get("dur", 0.0) * 1e-6
        if cat == "kernel":
            name = str(e.get("name", "")).lower()
            kind = "attention" if "attn" in name or "attention" in name else (
                "gemm" if e["args"].get("flops", 0) > 0 else "memory")
            out[kind] += dur
        elif cat == "optimizer":
            out["memory"] += dur
        elif cat in COMM_CATS:
            out["comm"] += dur
    return out


def trace_rows(t: TraceProfile, doc: dict) -> dict[str, Any]:
    """Traced vs simulated seconds per op kind (simulated only when the run is known)."""
    sim = simulated_kinds(t.run.workload, t.run.overrides, doc) if t.run else None
    rows = [{"kind": k, "traced_s": t.kind_s[k],
             "simulated_s": sim[k] if sim else None} for k in KINDS]
    top = sorted(t.unmapped_s.items(), key=lambda kv: -kv[1])[:5]
    return {"file": t.where, "steps": t.steps, "mapped_fraction": t.mapped_fraction,
            "rows": rows, "unmapped_top": [{"kernel": k, "s": v} for k, v in top],
            "workload": t.run.workload if t.run else None}


def intervals(runs: list[StepRun], doc: dict, stages: list[StageFit]) -> list[dict]:
    """The interval ``clustersim run`` will print on the calibrated file, per measured run
    (or for llama3-8b when no step time was given), and the runs' leave-one-out band."""
    from ..api import simulate

    cases = [(r.workload, r.overrides, r.step_time_s) for r in runs] or [("llama3-8b", {}, None)]
    steps = next((s for s in stages if s.stage == "steps"), None)
    loo_q = conformal_q(steps.loo) if steps and len(steps.loo) >= 2 else None
    out = []
    for workload, sets, measured in cases:
        r = simulate(workload, doc, overrides=sets)
        iv = r.step_time_interval_s
        out.append({"workload": workload, "set": sets, "measured_s": measured,
                    "predicted_s": r.step_time_s, "low_s": iv["low"], "high_s": iv["high"],
                    "coverage": r.interval_coverage, "basis": r.interval_basis,
                    "loo_log_halfwidth": loo_q})
    return out
