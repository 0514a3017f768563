"""Scaling curves: throughput and MFU against GPU count (or sequence length, or any knob).

One panel per metric, one line per ``label`` (a plan, a topology, a model),
points sorted by ``x``. Perfect weak scaling is a straight line of slope 1 in
tokens/s on log-log axes and a flat line in MFU; where a curve bends, some
communication or the pipeline bubble has stopped being hidden. The x axis is
logarithmic (base 2) when ``x`` spans more than a factor of 8, and then so
is the throughput axis.

Input: a :class:`pandas.DataFrame` with the ``x`` column (``num_gpus`` by
default), the metric columns (``tokens_per_s``, ``mfu`` by default; any
numeric :class:`~simulator.metrics.Result` field works) and a ``label``
column. Without one, the label is built from ``workload`` / ``topology`` /
``plan.schedule`` where those differ between rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError
from .figures import new_figure, wrap_title

# column -> (axis label with unit, multiplier)
METRICS = {
    "tokens_per_s": ("throughput (tokens/s)", 1.0),
    "mfu": ("MFU (% of peak)", 100.0),
    "step_time_s": ("step time (s)", 1.0),
    "model_tflops_per_gpu": ("model TFLOP/s per GPU", 1.0),
    "bubble_fraction": ("pipeline bubble (% of step)", 100.0),
    "memory_per_gpu_GB": ("memory per GPU (GB)", 1.0),
}
X_LABELS = {"num_gpus": "GPUs", "seq_length": "sequence length (tokens)",
            "model.seq_length": "sequence length (tokens)"}


def scaling_figure(df: pd.DataFrame, x: str = "num_gpus",
                   ys: Sequence[str] = ("tokens_per_s", "mfu"), label: str = "label",
                   title: str | None = None):
    """Lines of each metric in ``ys`` against ``x``, one per label; returns the figure."""
    missing = [c for c in (x, *ys) if c not in df.columns]
    if missing:
        raise ConfigError("columns", missing, f"not in the table; it has {list(df.columns)}")
    if df.empty:
        raise ConfigError("rows", 0, "need at least one row to plot")
    labels = _labels(df, label)
    width = 5.0 * len(ys) + 1.6
    fig, axes = new_figure(width, 4.4, ncols=len(ys))
    axes = np.atleast_1d(axes)
    xs = pd.to_numeric(df[x], errors="coerce")
    logx = bool((xs > 0).all() and xs.max() / xs.min() > 8)
    for ax, y in zip(axes, ys, strict=True):
        name, mult = METRICS.get(y, (y, 1.0))
        for lab in dict.fromkeys(labels):
            sel = labels == lab
            part = pd.DataFrame({"x": xs[sel], "y": pd.to_numeric(df.loc[sel, y])})
            part = part.dropna().sort_values("x")
            ax.plot(part["x"], part["y"] * mult, marker="o", ms=4, label=lab)
        if logx:
            _log_x(ax, xs)
        if logx and y == "tokens_per_s":
            ax.set_yscale("log")  # weak scaling: a straight line of slope 1
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel(X_LABELS.get(x, x))
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    fig.suptitle(wrap_title(title or _title(df, x, ys), width), fontsize=10)
    return fig


def _log_x(ax, xs: pd.Series) -> None:
    """Base-2 log axis ticked at the data's own x values, written as plain numbers."""
    ax.set_xscale("log", base=2)
    ticks = sorted(set(xs.dropna()))
    if len(ticks) <= 12:
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()


def _labels(df: pd.DataFrame, label: str) -> pd.Series:
    if label in df.columns:
        return df[label].astype(str).reset_index(drop=True).set_axis(df.index)
    keys = [c for c in ("workload", "topology", "plan.schedule") if c in df.columns]
    varying = [c for c in keys if df[c].nunique() > 1]
    if not varying:
        return pd.Series(["all"] * len(df), index=df.index)
    return df[varying].astype(str).agg(" ".join, axis=1)


def _title(df: pd.DataFrame, x: str, ys: Sequence[str]) -> str:
    what = " and ".join(METRICS.get(y, (y, 1))[0].split(" (")[0] for y in ys)
    common = [str(df[c].iloc[0]) for c in ("workload", "topology")
              if c in df.columns and df[c].nunique() == 1]
    head = f"Scaling: {what} vs {X_LABELS.get(x, x)}"
    return head + (f" ({' on '.join(common)})" if common else "")
