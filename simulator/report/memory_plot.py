"""Memory per pipeline stage: what fills one GPU of each stage, against its HBM.

One stacked bar per stage, from :func:`simulator.memory.estimate_memory`:
weights, Transformer Engine's cached FP8 weight copies, gradients, optimizer
state, activations held at the stage's peak (1F1B keeps ``p - s`` micro-batches
in flight on stage ``s``, so early stages hold the most), communication buffers
and the framework allowance. The red line is the GPU's capacity; a bar above it
does not fit. Decimal GB
(1e9 bytes), as :meth:`StageMemory.breakdown_GB` reports.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .figures import new_figure, plan_label, wrap_title

GB = 1e9
COMPONENT_COLORS = {
    "parameters": "#1f77b4",
    "fp8_weight_copies": "#9edae5",
    "gradients": "#aec7e8",
    "optimizer": "#ff7f0e",
    "activations": "#2ca02c",
    "comm_buffers": "#d62728",
    "framework": "#7f7f7f",
}


def memory_figure(report: Any, title: str | None = None):
    """Stacked bars of ``report.stages[i].breakdown_GB()`` with the capacity line."""
    stages = report.stages
    n = len(stages)
    width = max(6.5, 2.0 + 0.45 * n)
    fig, ax = new_figure(width, 4.8)
    x = np.arange(n)
    bottom = np.zeros(n)
    rows = [st.breakdown_GB() for st in stages]
    for comp, color in COMPONENT_COLORS.items():
        vals = np.array([row.get(comp, 0.0) for row in rows])
        if not vals.any():
            continue
        ax.bar(x, vals, bottom=bottom, width=0.7, color=color,
               label=comp.replace("_", " "), edgecolor="white", linewidth=0.5)
        bottom += vals
    cap = report.capacity_bytes / GB
    ax.axhline(cap, color="red", lw=1.2, ls="--", label=f"capacity {cap:.0f} GB")
    for xi, top in zip(x, bottom, strict=True):
        ax.annotate(f"{top:.0f}", (xi, top), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7,
                    color="red" if top > cap else "black")
    ax.set_xticks(x, [str(i) for i in range(n)], fontsize=8)
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("memory per GPU (GB)")
    ax.set_ylim(0, max(bottom.max(), cap) * 1.15)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(wrap_title(title or "Memory per GPU by pipeline stage", width - 1.8),
                 fontsize=10)
    return fig


def memory_title(result: Any, report: Any) -> str:
    """Title naming model, topology and plan, with the verdict."""
    verdict = "fits" if report.fits else "DOES NOT FIT"
    return (f"Memory per GPU: {result.workload} on {result.topology}\n"
            f"{plan_label(result.plan)}, MBS {result.plan['mbs']}, recompute "
            f"{result.plan['recompute']}: worst stage {report.worst.stage} "
            f"{report.memory_per_gpu_GB:.1f} GB, {verdict}")


def memory_figure_for(run: Any, title: str | None = None):
    """Memory figure of a :class:`~simulator.report.figures.SimRun`."""
    from ..memory import estimate_memory

    plan = run.plan
    report = estimate_memory(plan.workload, plan.topo, plan.partition)
    return memory_figure(report, title or memory_title(run.result, report))
