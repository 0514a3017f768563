"""Shared plumbing for every figure: headless backend, atomic saving, titles, units.

Matplotlib is switched to the non-interactive Agg backend *before* pyplot is
imported, so plotting works on a server with no display and never opens a
window. Figures are written atomically: rendered to a temporary file in the
target directory, then moved over the destination with :func:`os.replace`, so
a reader never sees half an image. The format follows the file extension
(``.png`` raster, ``.svg`` vector).

Colours are fixed per concept (compute, each communication axis, bubble) so
the same thing looks the same in every figure of the gallery.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # only after use("Agg"): never a display backend
from matplotlib.figure import Figure

from ..errors import ConfigError
from ..io import atomic_write

FORMATS = {".png": "png", ".svg": "svg"}
DPI = 110

# One colour per concept, shared by all figures (matplotlib's tab10 palette).
COLORS = {
    "compute": "#1f77b4",
    "tp": "#ff7f0e",
    "cp": "#9467bd",
    "ep": "#8c564b",
    "pp": "#d62728",
    "dp": "#17becf",
    "bubble": "#c7c7c7",
    "host": "#98df8a",
    "variability": "#ffbb78",
    "forward": "#1f77b4",
    "backward": "#2ca02c",
    "recompute": "#bcbd22",
    "optimizer": "#7f7f7f",
    "param_gather": "#e377c2",
}

LABELS = {
    "compute": "compute",
    "tp": "exposed TP comm",
    "cp": "exposed CP comm",
    "ep": "exposed EP comm",
    "pp": "exposed PP comm",
    "dp": "exposed DP comm",
    "bubble": "pipeline bubble",
    "host": "host launch stall",
    "variability": "waiting for the slowest peer",
}


def new_figure(width: float, height: float, ncols: int = 1, nrows: int = 1, **kw: Any):
    """A fresh (figure, axes) pair, not registered with pyplot's global figure list."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=True, **kw)
    return fig, axes


def save_figure(fig: Figure, path: str | Path, dpi: int = DPI) -> Path:
    """Write ``fig`` to ``path`` atomically; the format comes from the extension."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError("--output", str(path), "must end in .png or .svg")
    return atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, dpi=dpi,
                                                     metadata=_metadata(fmt)))


def _metadata(fmt: str) -> dict[str, Any]:
    # No creation date, so regenerating an unchanged figure gives identical bytes.
    if fmt == "svg":
        return {"Date": None}
    return {"Software": "clustersim"}


def close(fig: Figure) -> None:
    """Release a figure made by :func:`new_figure` (kept for symmetry with pyplot)."""
    fig.clear()


def wrap_title(text: str, width_inches: float) -> str:
    """Wrap each line of a title so it fits a figure ``width_inches`` wide (10 pt font)."""
    chars = max(30, int(width_inches * 13))
    return "\n".join(textwrap.fill(line, chars) for line in text.splitlines())


def time_unit(seconds: float) -> tuple[float, str]:
    """(multiplier, unit) to show a duration of ``seconds`` readably: s or ms."""
    return (1.0, "s") if seconds >= 2.0 else (1e3, "ms")


def plan_label(plan: dict[str, Any], sep: str = " ") -> str:
    """``TP8 PP16 DP128 1f1b`` (CP, EP, VP only when used) from ``Result.plan``;
    ``sep`` goes between the degrees and the schedule (``"\\n"`` for tick labels)."""
    parts = [f"TP{plan['tp']}", f"PP{plan['pp']}", f"DP{plan['dp']}"]
    parts += [f"{k.upper()}{plan[k]}" for k in ("cp", "ep", "vp") if plan.get(k, 1) > 1]
    return " ".join(parts) + (f"{sep}{plan['schedule']}" if plan.get("schedule") else "")


def run_title(result: Any, what: str) -> str:
    """``what: model on topology (N GPUs, plan)`` for a :class:`~simulator.metrics.Result`."""
    p = result.plan
    return (f"{what}: {result.workload} on {result.topology}\n"
            f"{result.num_gpus} GPUs, {plan_label(p)}, {p['microbatches']} micro-batches "
            f"of {p['mbs']}")


@dataclass
class SimRun:
    """One simulated configuration with everything the figures need."""

    label: str
    result: Any  # simulator.metrics.Result
    plan: Any  # simulator.workload.plan.Plan
    engine: Any  # simulator.engine.EngineResult (records kept)


def simulate_run(workload: Any, topology: Any, overrides: dict[str, Any] | None = None,
                 topology_overrides: dict[str, Any] | None = None,
                 label: str | None = None) -> SimRun:
    """Resolve and simulate one configuration, keeping the engine's records."""
    from ..api import resolve, simulate_resolved

    w, t = resolve(workload, topology, overrides, topology_overrides)
    result, plan, engine = simulate_resolved(w, t, keep_records=True)
    if label is None:
        label = f"{result.workload}\n{result.topology}\n{plan_label(result.plan)}"
    return SimRun(label, result, plan, engine)


__all__ = ["COLORS", "LABELS", "SimRun", "close", "new_figure", "plan_label", "plt",
           "run_title", "save_figure", "simulate_run", "time_unit", "wrap_title"]
