"""Step-time breakdown: where one training step's time goes, one stacked bar per configuration.

Each bar is :attr:`simulator.metrics.Result.breakdown_s` of the critical
pipeline stage: compute (including the optimizer step), the communication of
each parallel axis that is *not* hidden behind compute (TP, CP, EP, PP, DP)
and the pipeline bubble. The segments sum to ``step_time_s``, so the bar's
height is the step time and the segments show what to attack first: a tall
bubble asks for more micro-batches or an interleaved schedule, tall exposed
TP asks for communication overlap or a smaller TP group.

Input is either a list of :class:`~simulator.metrics.Result` or a table with
the sweep's flattened columns (``breakdown_s.compute`` ...; see
:meth:`Result.to_series`), so a sweep's CSV plots directly.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ConfigError
from .figures import COLORS, LABELS, new_figure, plan_label, time_unit, wrap_title

COMPONENTS = ("compute", "tp", "cp", "ep", "pp", "dp", "host", "bubble", "variability")


def breakdown_frame(results: Sequence[Any], labels: Sequence[str] | None = None
                    ) -> pd.DataFrame:
    """One row per result: ``label``, the :data:`COMPONENTS` (s), ``step_time_s``.

    A plan that does not fit in GPU memory says so in its label: its timing
    assumes memory it does not have.
    """
    rows = []
    auto = _default_labels(results)
    for i, r in enumerate(results):
        label = labels[i] if labels else auto[i]
        if not getattr(r, "fits_in_memory", True):
            label += "\n(does not fit)"
        row = {"label": label,
               "workload": r.workload, "topology": r.topology,
               "plan": plan_label(r.plan), "step_time_s": r.step_time_s, "mfu": r.mfu}
        row.update({k: float(r.breakdown_s.get(k, 0.0)) for k in COMPONENTS})
        rows.append(row)
    return pd.DataFrame(rows)


def _default_labels(results: Sequence[Any]) -> list[str]:
    """Workload / topology only where they differ (the title names common ones); the plan
    always; a running number when that still leaves two bars with the same name."""
    parts = [[r.workload, r.topology, plan_label(r.plan, "\n")] for r in results]
    keep = [j for j in range(3) if j == 2 or len({p[j] for p in parts}) > 1]
    out = ["\n".join(p[j] for j in keep) for p in parts]
    if len(set(out)) < len(out):
        out = [f"{o}\n#{i + 1}" for i, o in enumerate(out)]
    return out


def frame_from_table(df: pd.DataFrame, label: str | None = None) -> pd.DataFrame:
    """Normalise a sweep table (``breakdown_s.<k>`` or bare ``<k>`` columns).

    Rows whose ``status`` is not ``ok`` (invalid or failed sweep points) are left out.
    """
    if "status" in df.columns:
        df = df[df["status"].astype(str) == "ok"]
        if df.empty:
            raise ConfigError("--csv", "status", "no row has status 'ok': nothing to plot")
    out = pd.DataFrame(index=df.index)
    for k in COMPONENTS:
        for col in (f"breakdown_s.{k}", k):
            if col in df.columns:
                out[k] = pd.to_numeric(df[col], errors="coerce").fillna(0.0)
                break
        else:
            out[k] = 0.0
    if not out[list(COMPONENTS)].to_numpy().any():
        raise ConfigError("--csv", list(df.columns)[:8],
                          "needs breakdown columns such as breakdown_s.compute "
                          "(the flattened Result columns a sweep writes)")
    out["step_time_s"] = (pd.to_numeric(df["step_time_s"]) if "step_time_s" in df
                          else out[list(COMPONENTS)].sum(axis=1))
    out["label"] = _table_labels(df, label)
    for col in ("workload", "topology"):
        out[col] = df[col].astype(str) if col in df else ""
    if "mfu" in df.columns:
        out["mfu"] = pd.to_numeric(df["mfu"], errors="coerce")
    return out.reset_index(drop=True)


def _table_labels(df: pd.DataFrame, label: str | None) -> list[str]:
    if label is not None:
        if label not in df.columns:
            raise ConfigError("--label", label, f"is not a column; columns: {list(df.columns)}")
        return df[label].astype(str).tolist()
    if "label" in df.columns:
        return df["label"].astype(str).tolist()
    # Otherwise: workload / topology where they differ, the plan, then any other plan
    # knob that differs (micro-batch size, recomputation...).
    cols = [c for c in ("workload", "topology") if c in df.columns and df[c].nunique() > 1]
    has_plan = all(f"plan.{k}" in df.columns for k in ("tp", "pp", "dp"))
    extra = [c for c in df.columns if c.startswith("plan.") and df[c].nunique() > 1
             and c.removeprefix("plan.") not in PLAN_KEYS]
    out = []
    for _, row in df.iterrows():
        parts = [str(row[c]) for c in cols]
        if has_plan:
            parts.append(plan_label(_plan_of(row), "\n"))
        parts += [f"{c.removeprefix('plan.')}={row[c]}" for c in extra]
        out.append("\n".join(parts))
    return out if all(out) else [f"row {i}" for i in range(len(df))]


PLAN_KEYS = ("tp", "pp", "dp", "cp", "ep", "vp", "schedule", "layers_per_stage",
             "microbatches", "gbs")


def _plan_of(row: pd.Series) -> dict[str, Any]:
    plan: dict[str, Any] = {}
    for k in ("tp", "pp", "dp", "cp", "ep", "vp"):
        v = row.get(f"plan.{k}", 1)
        plan[k] = int(v) if pd.notna(v) else 1
    sched = row.get("plan.schedule")
    plan["schedule"] = str(sched) if pd.notna(sched) else ""
    return plan


def breakdown_figure(data: pd.DataFrame | Sequence[Any], title: str | None = None,
                     labels: Sequence[str] | None = None):
    """Stacked bars of the step-time breakdown, one per configuration.

    ``data``: a list of results, or a frame from :func:`breakdown_frame` /
    :func:`frame_from_table`. Returns the matplotlib figure; each bar's
    segments are ``ax.patches`` (zero components are not drawn).
    """
    df = data if isinstance(data, pd.DataFrame) else breakdown_frame(data, labels)
    if df.empty:
        raise ConfigError("configurations", 0, "need at least one configuration to plot")
    scale, unit = time_unit(float(df["step_time_s"].max()))
    n = len(df)
    width = max(6.5, 2.6 + (1.25 if n <= 8 else 0.85) * n)
    fig, ax = new_figure(width, 5.2)
    x = np.arange(n)
    bottom = np.zeros(n)
    for k in COMPONENTS:
        vals = df[k].to_numpy(dtype=float) * scale
        if not vals.any():
            continue
        ax.bar(x, vals, bottom=bottom, width=0.6, color=COLORS[k], label=LABELS[k],
               edgecolor="white", linewidth=0.5)
        bottom += vals
    for xi, top, row in zip(x, bottom, df.itertuples(index=False), strict=True):
        note = f"{_fmt(top)} {unit}"
        if "mfu" in df.columns and np.isfinite(row.mfu):
            note += f"\nMFU {row.mfu * 100:.0f}%"
        ax.annotate(note, (xi, top), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [_wrap_label(t, n) for t in df["label"]], fontsize=8 if n <= 8 else 7)
    ax.set_ylabel(f"time per training step ({unit})")
    ax.set_ylim(0, bottom.max() * 1.18)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(wrap_title(title or _title(df), width - 2.0), fontsize=10)
    return fig


def _fmt(x: float) -> str:
    """Three significant digits, keeping a trailing zero (12.0, not 12)."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def _wrap_label(text: str, bars: int) -> str:
    """Narrow bars get their label lines wrapped at about 9 characters."""
    if bars <= 8:
        return text
    return "\n".join(textwrap.fill(line, 9, break_long_words=False)
                     for line in str(text).splitlines())


def _title(df: pd.DataFrame) -> str:
    common = [str(df[c].iloc[0]) for c in ("workload", "topology")
              if c in df.columns and df[c].nunique() == 1 and str(df[c].iloc[0])]
    head = "Step-time breakdown"
    return f"{head}: {' on '.join(common)}" if common else head
