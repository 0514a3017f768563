"""Figures of the validation report (matplotlib, Agg backend, written atomically).

* ``validation_scatter.png``: predicted against measured for every case, log-log, the
  y = x line and +-25 % guides, one colour per category (units differ per category:
  seconds for times, GB/s for bandwidths; the ratio is what the eye reads).
* ``validation_dense_scale.png``: signed step-time error against GPU count, one line per
  case group (solid bf16/fp16, dashed fp8): how the error moves with scale at fixed work
  per GPU, and how far apart the models sit.
* ``validation_collectives.png``: predicted nccl-tests bus bandwidth against message size
  (lines) with the measured points, for DGX H100 (NVLS and ring), DGX A100, GB200 NVL72 and
  across nodes.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ..config import load_workload
from ..precision import precision_of
from .cases import precision
from .predict import predicted_busbw
from .report import Row, write_atomic

COLOURS = {"dense_step_time": "tab:blue", "collective_busbw": "tab:green",
           "layer_time": "tab:orange", "ep_alltoall": "tab:purple"}
SIZES = np.logspace(20, 33, 40, base=2.0)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    write_atomic(path, buf.getvalue())
    return path


def scatter(rows: list[Row], path: str | Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for cat, colour in COLOURS.items():
        sub = [r for r in rows if r.case.category == cat]
        if not sub:
            continue
        for held, marker in ((False, "o"), (True, "^")):
            pts = [r for r in sub if r.case.holdout == held]
            if pts:
                ax.scatter([r.case.measured for r in pts], [r.predicted for r in pts],
                           c=colour, marker=marker, s=28, alpha=0.8,
                           label=f"{cat}{' (held out)' if held else ''}")
    vals = [v for r in rows for v in (r.case.measured, r.predicted)]
    lo, hi = min(vals) / 2, max(vals) * 2
    xs = np.array([lo, hi])
    ax.plot(xs, xs, "k-", lw=1, label="y = x")
    ax.plot(xs, xs * 1.25, "k:", lw=0.8, label="+-25 %")
    ax.plot(xs, xs / 1.25, "k:", lw=0.8)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
           xlabel="measured (s or GB/s)", ylabel="predicted (s or GB/s)",
           title="clustersim: predicted vs measured")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", lw=0.3)
    return _save(fig, Path(path))


def _gpus(row: Row) -> int:
    spec = row.case.spec
    return load_workload(spec["workload"], spec["overrides"]).parallelism.num_gpus


def dense_scale(rows: list[Row], path: str | Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    dense = [r for r in rows if r.case.category == "dense_step_time"]
    groups = list(dict.fromkeys(r.case.group for r in dense))
    colours = plt.get_cmap("tab20")
    for i, group in enumerate(groups):
        g = sorted((r for r in dense if r.case.group == group), key=_gpus)
        style = "--" if precision_of(precision(g[0].case)).scaled else "-"
        ax.plot([_gpus(r) for r in g], [100 * r.error for r in g], style, marker="o", ms=4,
                lw=1.2, color=colours(i % 20), label=group)
        held = [r for r in g if r.case.holdout]
        ax.plot([_gpus(r) for r in held], [100 * r.error for r in held], "k^", ms=6,
                mfc="none", label="held out" if i == 0 else None)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(xscale="log", xlabel="GPUs", ylabel="step time error, predicted / measured - 1 (%)",
           title="Dense step time: error against scale (dashed: fp8)")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _save(fig, Path(path))


# (title, [(label, topology, op, ranks, algo)], case-group prefixes whose points to draw)
PANELS = [
    ("DGX H100, 8 GPUs (NVLink4)", [("all-reduce (best: NVLS)", "dgx-h100", "all_reduce", 8,
                                     None),
                                    ("all-reduce ring", "dgx-h100", "all_reduce", 8, "ring"),
                                    ("all-gather", "dgx-h100", "all_gather", 8, None)],
     ("dgx-h100-allreduce", "azure-h100", "h100-nvlink")),
    ("DGX A100, 8 GPUs (NVLink3)", [("all-reduce", "dgx-a100", "all_reduce", 8, None)],
     ("dgx-a100-allreduce-8gpu",)),
    ("GB200 NVL72, 72 GPUs (NVLink5)", [("all-reduce", "gb200-nvl72", "all_reduce", 72, None)],
     ("gb200",)),
    ("Across nodes (InfiniBand)", [("A100 2 nodes", "dgx-a100", "all_reduce", 16, None),
                                   ("A100 16 nodes", "dgx-a100", "all_reduce", 128, None),
                                   ("H100 2 nodes ring", "dgx-h100", "all_reduce", 16, "ring")],
     ("dgx-a100-internode", "h100-internode")),
]


def collectives(rows: list[Row], path: str | Path) -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (title, curves, prefixes) in zip(axes.flat, PANELS, strict=True):
        for label, topo, op, ranks, algo in curves:
            bw = [predicted_busbw(topo, op, ranks, s, 1, algo) for s in SIZES]
            ax.plot(SIZES, bw, "-", lw=1.4, label=f"predicted {label}")
        pts = [r for r in rows if r.case.category == "collective_busbw"
               and r.case.group.startswith(prefixes)]
        for group in sorted({r.case.group for r in pts}):
            g = [r for r in pts if r.case.group == group]
            ax.plot([r.case.spec["bytes"] for r in g], [r.case.measured for r in g], "o",
                    ms=5, label=f"measured {group}")
        ax.set(xscale="log", title=title, xlabel="message size (bytes)",
               ylabel="bus bandwidth (GB/s)")
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return _save(fig, Path(path))


def write_figures(rows: list[Row], directory: str | Path) -> list[Path]:
    """Write the figures the rows allow into ``directory``; returns their paths."""
    d = Path(directory)
    out = [scatter(rows, d / "validation_scatter.png")]
    if any(r.case.category == "dense_step_time" for r in rows):
        out.append(dense_scale(rows, d / "validation_dense_scale.png"))
    if any(r.case.category == "collective_busbw" for r in rows):
        out.append(collectives(rows, d / "validation_collectives.png"))
    return out
