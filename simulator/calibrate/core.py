"""``calibrate``: fit a base topology's constants to a user's measurements, stage by stage.

Stages, in order, each starting from the constants the previous ones left:

1. ``kernels`` (GEMM / attention timings): GEMM and attention efficiencies, the GEMM shape
   half-dimension, the per-kernel overhead (:func:`.problems.kernel_problem`);
2. ``network`` (nccl-tests tables): per tier, ring / all-to-all efficiency, per-step latency,
   the small-message curve and the NVLS bus bandwidth (:func:`.problems.network_problem`);
3. ``steps`` (measured step times): the sustained GEMM (bf16 and / or FP8) and attention
   efficiencies that whole training steps reach (:func:`.problems.step_problem`); isolated
   kernels run faster than a training step sustains (power-limited clocks, launch gaps), so
   when both are given the step times decide.

Profiler traces are not fitted: they are compared per op kind with the simulated step.
"""

from __future__ import annotations

import copy
import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import load_topology
from ..config.loader import apply_overrides, read_document
from ..hardware import Topology
from . import detect
from .fit import StageFit, fit_stage
from .measurements import Measurements, StepRun
from .problems import Problem, bounds, kernel_problem, network_problem, step_problem, value


@dataclass
class Calibration:
    """Everything the report and the output file need."""

    base_name: str
    base_doc: dict
    doc: dict
    stages: list[StageFit]
    measurements: Measurements
    files_by_stage: dict[str, list[str]]
    date: str
    traces: list[dict] = field(default_factory=list)
    intervals: list[dict] = field(default_factory=list)
    carried: dict[str, str] = field(default_factory=dict)  # constant -> the one it follows

    def stage_of(self, path: str) -> StageFit | None:
        """The last stage that fitted ``path`` and identified it (else the last that tried)."""
        tried = [s for s in self.stages if path in s.values]
        hit = [s for s in tried if s.identified[path]]
        return (hit or tried or [None])[-1]


def set_path(doc: dict, path: str, x: float, rounded: bool = False) -> None:
    node: Any = doc
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[parts[-1]] = float(f"{x:.4g}") if rounded else float(x)


def with_values(doc: dict, values: dict[str, float], rounded: bool = False) -> dict:
    """``doc`` with the constants of ``values``; ``rounded``: 4 significant digits, as written."""
    out = copy.deepcopy(doc)
    for k, v in values.items():
        set_path(out, k, v, rounded)
    return out


def calibrate(base: str | Path | dict, files: list[str | Path], date: str | None = None,
              loo: bool = True, compare: bool = True, min_bytes: float = 0.0,
              hold: tuple[str, ...] = (), base_overrides: dict[str, Any] | None = None
              ) -> Calibration:
    """Fit ``base`` to ``files``; returns the calibration (write it with :mod:`.write`).

    ``min_bytes``: nccl-tests rows below this size are not fitted (NCCL's LL / LL128
    protocols below a few MiB are outside the alpha-beta + saturation-curve model when a
    system switches protocol abruptly). ``hold``: constants (dotted paths, or a prefix such
    as ``tiers.0``) kept at their base values, e.g. a tier already calibrated on other data.
    ``base_overrides``: dotted topology fields set before fitting (a datasheet value the
    base gets wrong for this cluster, such as its NICs' line rate)."""
    base_doc, _, source = read_document(base, "topologies")
    base_doc = copy.deepcopy(base_doc)
    if base_overrides:
        base_doc = apply_overrides(base_doc, base_overrides)
    topo = Topology.from_config(load_topology(base_doc))
    ms = detect.read(list(files), base_doc)
    ms.collectives = [p for p in ms.collectives if p.nbytes >= min_bytes]
    values: dict[str, float] = {}
    stages: list[StageFit] = []
    by_stage: dict[str, list[str]] = {}
    problems: list[Problem] = []
    if ms.gemms or ms.attention:
        problems.append(kernel_problem(topo, ms.gemms, ms.attention))
    if ms.collectives:
        problems.append(network_problem(topo, base_doc, ms.collectives))
    problems = [_held(p, hold) for p in problems]
    for prob in problems:
        stages.append(_stage(prob, base_doc, values, loo, iterations=40, loo_iterations=8))
    if ms.runs:
        prob = _held(step_problem(lambda v: with_values(base_doc, {**values, **v}), ms.runs,
                                  _step_params(ms.runs, base_doc)), hold)
        stages.append(_stage(prob, base_doc, values, loo, iterations=12, loo_iterations=3))
    for st in stages:
        by_stage[st.stage] = sorted({w.split(":")[0] for w in _wheres(ms, st.stage)})
    carried = carry_same_nic(base_doc, values)
    doc = with_values(base_doc, values, rounded=True)
    cal = Calibration(base_name=str(base_doc.get("name", source)), base_doc=base_doc, doc=doc,
                      stages=stages, measurements=ms, files_by_stage=by_stage,
                      date=date or _dt.date.today().isoformat(), carried=carried)
    if compare:
        from .compare import intervals, trace_rows

        cal.traces = [trace_rows(t, doc) for t in ms.traces]
        cal.intervals = intervals(ms.runs, doc, stages)
    return cal


def _stage(prob: Problem, base_doc: dict, values: dict[str, float], loo: bool,
           iterations: int, loo_iterations: int) -> StageFit:
    start = {p: values.get(p, value(base_doc, p)) for p in prob.params}
    rng = {p: bounds(p, base_doc) for p in prob.params}
    st = fit_stage(prob, start, dict(start), rng, iterations=iterations,
                   loo_iterations=loo_iterations, loo=loo)
    values.update({p: v for p, v in st.values.items() if st.identified[p]})
    return st


def carry_same_nic(base_doc: dict, values: dict[str, float]) -> dict[str, str]:
    """Scale-out tiers no measurement spans follow a fitted inner tier on the same NIC.

    An outer tier whose per-GPU line rate equals a fitted inner scale-out tier's is the same
    NIC crossing more switches (dgx-h100: "same NIC as the leaf tier"), so its ring and
    all-to-all efficiencies take that tier's fitted / base ratio (never above 1). Returns
    the carried constants and the one each follows; ``values`` gains them."""
    tiers = base_doc["tiers"]
    carried: dict[str, str] = {}
    for j in range(2, len(tiers)):
        for name in ("efficiency", "alltoall_efficiency"):
            target = f"tiers.{j}.{name}"
            if target in values:
                continue
            for i in range(j - 1, 0, -1):
                src = f"tiers.{i}.{name}"
                if src in values and src not in carried and \
                        tiers[i]["bandwidth_GBps"] == tiers[j]["bandwidth_GBps"]:
                    ratio = values[src] / value(base_doc, src)
                    values[target] = min(1.0, value(base_doc, target) * ratio)
                    carried[target] = src
                    break
    return carried


def _held(prob: Problem, hold: tuple[str, ...]) -> Problem:
    """``prob`` without the constants ``hold`` names (a path or a prefix ending at a dot)."""
    keep = [p for p in prob.params if not any(p == h or p.startswith(h + ".") for h in hold)]
    return Problem(prob.stage, prob.points, keep, prob.predict)


def _step_params(runs: list[StepRun], base_doc: dict) -> list[str]:
    from ..api import resolve

    precisions = {resolve(r.workload, base_doc, r.overrides)[0].training.precision
                  for r in runs}
    out = []
    if precisions - {"fp8"}:
        out.append("gpu.gemm_efficiency")
    if "fp8" in precisions:
        out.append("gpu.fp8_gemm_efficiency")
    return [*out, "gpu.attention_efficiency"]


def _wheres(ms: Measurements, stage: str) -> list[str]:
    pts: list[Any] = {"kernels": [*ms.gemms, *ms.attention], "network": ms.collectives,
                      "steps": ms.runs}[stage]
    return [p.where for p in pts]
