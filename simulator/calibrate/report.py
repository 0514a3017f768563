"""The fit report (Markdown or JSON): per constant, fitted or kept, identified or not, and the
measurement that would identify it; residuals and leave-one-out errors per stage; traced vs
simulated time per op kind; the intervals the calibrated file gives.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .core import Calibration

# what would identify a constant the data left unidentified
WOULD_IDENTIFY = {
    "gemm_efficiency": "GEMM timings of large shapes (m, n, k >= 4096; `clustersim "
                       "bench-kernels`) or step times of dense runs",
    "fp8_gemm_efficiency": "FP8 GEMM timings (dtype fp8) or step times of FP8 runs",
    "gemm_half_dim": "GEMM timings over small and large shapes (m, n, k from 256 to 8192)",
    "attention_efficiency": "attention timings (bench-kernels attention rows) or step times "
                            "at two or more sequence lengths",
    "kernel_overhead_us": "timings of tiny kernels (m = n = k <= 256), where launch "
                          "overhead dominates",
    "efficiency": "nccl-tests up to >= 1 GiB across tier {tier} (all_reduce_perf -b 8 -e 8G)",
    "alltoall_efficiency": "alltoall_perf up to >= 1 GiB across tier {tier}",
    "latency_us": "nccl-tests from 8 B (latency-bound sizes) across tier {tier}",
    "half_bandwidth_MB": "nccl-tests at 64 KiB - 256 MiB across tier {tier}",
    "curve_exponent": "nccl-tests at 64 KiB - 256 MiB across tier {tier}",
    "nvls_busbw_GBps": "all_reduce_perf over the whole tier {tier} with NVLS on, up to 8 GiB",
}


def _tier_name(cal: Calibration, path: str) -> str:
    parts = path.split(".")
    if parts[0] != "tiers":
        return ""
    tier = cal.base_doc["tiers"][int(parts[1])]
    return f"{parts[1]} ({tier.get('name', '')}, {tier.get('size')} GPUs)"


GPU_CANDIDATES = ("gemm_efficiency", "fp8_gemm_efficiency", "gemm_half_dim",
                  "attention_efficiency", "kernel_overhead_us")
TIER_CANDIDATES = ("efficiency", "latency_us", "half_bandwidth_MB", "curve_exponent")


def unmeasured(cal: Calibration) -> list[dict[str, Any]]:
    """Constants no measurement touched: kept, with what would identify them."""
    from .problems import value

    tried = {p for s in cal.stages for p in s.values}
    paths = [f"gpu.{f}" for f in GPU_CANDIDATES] + [
        f"tiers.{i}.{f}" for i in range(len(cal.base_doc["tiers"])) for f in TIER_CANDIDATES]
    rows = []
    for path in paths:
        if path in tried:
            continue
        v = value(cal.base_doc, path)
        carried = cal.carried.get(path)
        rows.append({"constant": path, "stage": "carried" if carried else "-", "base": v,
                     "value": value(cal.doc, path), "identified": False, "at_bound": False,
                     "relative_se": None, "carried_from": carried,
                     "would_identify": WOULD_IDENTIFY[path.rsplit(".", 1)[1]].format(
                         tier=_tier_name(cal, path))})
    return rows


def constants(cal: Calibration, everything: bool = False) -> list[dict[str, Any]]:
    """One row per fitted constant (``everything``: also the constants nothing measured)."""
    rows = []
    for path in sorted({p for s in cal.stages for p in s.values}):
        st = cal.stage_of(path)
        field = path.rsplit(".", 1)[1]
        ident = st.identified[path]
        se = st.log_se[path]
        rows.append({
            "constant": path, "stage": st.stage, "base": st.base[path],
            "value": st.values[path], "identified": ident, "at_bound": st.at_bound[path],
            "weak": bool(st.weak.get(path)),
            "relative_se": None if not math.isfinite(se) else math.expm1(se),
            "would_identify": None if ident else
            WOULD_IDENTIFY.get(field, "more measurements").format(tier=_tier_name(cal, path)),
        })
    return rows + (unmeasured(cal) if everything else [])


def as_dict(cal: Calibration) -> dict[str, Any]:
    stages = []
    for st in cal.stages:
        pts = {"kernels": [*cal.measurements.gemms, *cal.measurements.attention],
               "network": cal.measurements.collectives, "steps": cal.measurements.runs}[st.stage]
        loo = dict(zip(st.loo_index, st.loo, strict=True))
        stages.append({
            "stage": st.stage, "measurements": st.n, "files": cal.files_by_stage[st.stage],
            "loo_rms_error": st.loo_rms, "max_abs_residual": st.max_abs_residual,
            "points": [{"where": p.where, "residual": r, "loo_error": loo.get(i)}
                       for i, (p, r) in enumerate(zip(pts, st.residuals, strict=True))]})
    return {"base": cal.base_name, "date": cal.date, "files": cal.measurements.files,
            "constants": constants(cal, everything=True), "stages": stages, "traces": cal.traces,
            "intervals": cal.intervals}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def markdown(cal: Calibration) -> str:
    d = as_dict(cal)
    out = [f"# Calibration of {d['base']} ({d['date']})", "",
           "Measurements: " + ", ".join(f"`{f}`" for f in d["files"]), "",
           "## Constants", "",
           "| constant | stage | base | fitted | identified | rel. s.e. | would identify it |",
           "|---|---|---|---|---|---|---|"]
    for c in d["constants"]:
        se = "-" if c["relative_se"] is None else f"{c['relative_se'] * 100:.1f} %"
        flag = ("weakly" if c.get("weak") else "yes") + (
            " (at bound)" if c["at_bound"] else "") if c["identified"] else (
            "not measured" if c["stage"] == "-" else "no")
        val = f"{c['value']:.4g}" if c["identified"] else f"{c['base']:.4g} (kept)"
        if c.get("carried_from"):
            flag, val = f"carried from `{c['carried_from']}`", f"{c['value']:.4g}"
        out.append(f"| `{c['constant']}` | {c['stage']} | {c['base']:.4g} | {val} | {flag} "
                   f"| {se} | {c['would_identify'] or ''} |")
    for st in d["stages"]:
        out += ["", f"## Stage `{st['stage']}`: {st['measurements']} measurements", "",
                "Leave-one-out RMS error " + ("n/a (no measurement to spare)"
                                              if st["loo_rms_error"] is None else
                                              f"{st['loo_rms_error'] * 100:.1f} %")
                + ", largest fit "
                f"residual {st['max_abs_residual'] * 100:.1f} %.", "",
                "| measurement | residual | leave-one-out |", "|---|---|---|"]
        out += [f"| `{p['where']}` | {_pct(p['residual'])} | {_pct(p['loo_error'])} |"
                for p in st["points"]]
    for t in d["traces"]:
        out += ["", f"## Trace `{t['file']}` ({t['steps']} steps, "
                    f"{t['mapped_fraction'] * 100:.1f} % of kernel time mapped)", "",
                "| op kind | traced s/step | simulated s/step |", "|---|---|---|"]
        out += [f"| {r['kind']} | {r['traced_s']:.4g} | "
                + ("-" if r["simulated_s"] is None else f"{r['simulated_s']:.4g}") + " |"
                for r in t["rows"]]
        if t["unmapped_top"]:
            out.append("\nUnmapped kernels: " + ", ".join(
                f"`{u['kernel'][:60]}` {u['s']:.3g} s" for u in t["unmapped_top"]))
    out += ["", "## Intervals the calibrated file gives", "",
            "| workload | measured s | predicted s | interval | basis |", "|---|---|---|---|---|"]
    for iv in d["intervals"]:
        cover = "coverage unknown" if iv["coverage"] is None else f"{iv['coverage']:.0%}"
        band = "-" if iv["low_s"] is None else \
            f"{iv['low_s']:.3g}-{iv['high_s']:.3g} s ({cover})"
        meas = "-" if iv["measured_s"] is None else f"{iv['measured_s']:.4g}"
        out.append(f"| {iv['workload']} {iv['set'] or ''} | {meas} | {iv['predicted_s']:.4g} "
                   f"| {band} | {iv['basis']} |")
    return "\n".join(out) + "\n"


def render(cal: Calibration, path: str | Path) -> str:
    """The report's text for ``path``'s format (JSON for ``.json``, else Markdown)."""
    return json.dumps(as_dict(cal), indent=1) + "\n" if Path(path).suffix == ".json" \
        else markdown(cal)


def write(cal: Calibration, path: str | Path, text: str | None = None) -> Path:
    from ..io import atomic_write_text

    path = Path(path)
    atomic_write_text(path, render(cal, path) if text is None else text)
    return path
