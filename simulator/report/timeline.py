"""Pipeline timeline: a Gantt chart of one simulated training step, one row per stage.

Each pipeline stage gets a thick *compute* lane, showing the forward (blue)
and backward (green) phase of every micro-batch in the order the schedule runs
them, and a thin *communication* lane underneath with the point-to-point
activation / gradient sends (red), the data-parallel gradient buckets (green)
and the parameter all-gather of the distributed optimizer (pink). The
optimizer step sits on the compute lane in grey. White space on the compute
lane is idle time: the pipeline bubble, or waiting for a transfer.

Drawn this way the schedules look as the papers draw them: GPipe's two
triangles of forwards then backwards (Huang et al. 2019, Fig. 2), 1F1B's
warm-up, steady one-forward-one-backward and drain (Narayanan et al. 2021,
Fig. 3), and the interleaved schedule's chunks (Fig. 4), here shaded lighter
for later model chunks. Micro-batches are numbered from 1, as in the papers.
With recomputation, the part of each backward spent re-running the forward is
hatched (its share of the phase's compute time, drawn at the phase start).

Zero-bubble schedules split the backward: B (input gradient, green) and W
(weight gradient, drawn in its own purple) appear as separate bars, W's filling
what would be bubble (Qi et al. 2024, Fig. 3). DualPipe's F&B pairs, a forward
and a backward of two micro-batches run overlapped, are outlined in black,
the forward drawn on the pair's first part in proportion to its duration
(DeepSeek-V3 report, Fig. 5).

Input: the :class:`~simulator.workload.plan.Plan` and the engine's
:class:`~simulator.engine.EngineResult` with records kept, i.e.
``simulate_resolved(w, t, keep_records=True)``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch

from .figures import COLORS, new_figure, run_title, time_unit, wrap_title

LANE = {"compute": (-0.42, 0.52), "comm": (0.14, 0.24)}  # (offset from row, height)
COMM_COLORS = {"pp": COLORS["pp"], "grad_sync": COLORS["dp"],
               "param_gather": COLORS["param_gather"]}
WGRAD_COLOR = "#6a3d9a"  # W steps: distinct from forward blue and backward green


def chunk_color(base: str, chunk: int, chunks: int) -> tuple[float, float, float]:
    """``base`` for chunk 0, mixed towards white for later chunks (interleaved)."""
    if chunks <= 1:
        return to_rgb(base)
    f = 0.55 * chunk / (chunks - 1)
    return tuple(c + (1.0 - c) * f for c in to_rgb(base))  # type: ignore[return-value]


def recompute_share(plan: Any, stage: int, chunk: int) -> float:
    """Fraction of a backward phase's compute time spent recomputing the forward."""
    ph = plan.phases.get(("B", stage, chunk))
    if ph is None:
        return 0.0
    comp = [o for o in ph.ops if o.stream == "compute"]
    total = sum(o.duration for o in comp)
    redo = sum(o.duration for o in comp if o.name.endswith("_recompute"))
    return redo / total if total > 0 else 0.0


MAX_PHASES = 96  # compute bars per stage past which the chart shows two windows


def timeline_figure(plan: Any, engine: Any, result: Any = None, title: str | None = None,
                    width: float = 13.0, max_phases: int = MAX_PHASES):
    """Gantt chart of ``engine.records``; returns the matplotlib figure.

    A stage with more than ``max_phases`` compute bars (128 micro-batches x 5 chunks is
    1,280) would draw each thinner than a pixel, so the chart then shows two windows side
    by side, the step's start (warm-up, first steady phases) and its end (drain, gradient
    sync, optimizer), each holding about ``max_phases / 2`` bars per stage; the title
    says what was left out."""
    recs = engine.records
    if not recs:
        raise ValueError("engine result has no records: simulate with keep_records=True")
    stages = len(plan.engine_input.schedule)
    chunks = plan.engine_input.fwd.shape[1]
    end = max(engine.step_time, max(r.end for r in recs))
    per_stage = max(np.bincount([r.stage for r in recs if r.stream == "compute"],
                                minlength=stages))
    windows = [(0.0, end)]
    if per_stage > max_phases:
        span = end * max_phases / per_stage / 2.0
        windows = [(0.0, span), (end - span, end)]
    scale, unit = time_unit(windows[0][1] - windows[0][0])
    fig, axes = new_figure(width, 1.4 + 0.55 * stages + (0.5 if result is not None else 0),
                           ncols=len(windows), sharey=True)
    axes = [axes] if len(windows) == 1 else list(axes)
    for i, (ax, (lo, hi)) in enumerate(zip(axes, windows, strict=True)):
        recompute, has_w, fused = _draw_window(ax, plan, recs, chunks, scale, (lo, hi),
                                               width / len(windows))
        ax.axvline(engine.step_time * scale, color="black", lw=0.8, ls="--")
        ax.set_xlim(lo * scale, hi * scale + ((hi - lo) * scale * 0.01 if hi == end else 0.0))
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        if len(windows) > 1:
            ax.set_title("start of the step" if i == 0 else "end of the step", fontsize=9)
    ax = axes[0]
    ax.set_ylim(stages - 0.5, -0.6)
    ax.set_yticks(np.arange(stages) - 0.16, [f"stage {s}" for s in range(stages)],
                  fontsize=8 if stages > 8 else 9)
    xlabel = f"time since the start of the step ({unit}); dashed line: step end"
    if len(windows) == 1:
        ax.set_xlabel(xlabel)
    else:
        fig.supxlabel(xlabel, fontsize=10)
    axes[-1].legend(handles=_legend(chunks, recompute, has_w, fused), loc="upper left",
                    bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    if title is None and result is not None:
        title = _title(result, scale, unit)
    if title and len(windows) > 1:
        title += (f"; {per_stage} phases per stage: the first and last "
                  f"{(windows[0][1] - windows[0][0]) * scale:.3g} {unit} of "
                  f"{end * scale:.4g} {unit} shown")
    if title and len(windows) == 1:
        ax.set_title(wrap_title(title, width - 2.0), fontsize=10)
    elif title:
        fig.suptitle(wrap_title(title, width - 2.0), fontsize=10)
    return fig


def _draw_window(ax: Any, plan: Any, recs: list, chunks: int, scale: float,
                 window: tuple[float, float], width: float) -> tuple[bool, bool, bool]:
    """The records overlapping ``window`` (s) on ``ax``; (recompute, W bars, F&B pairs)."""
    lo, hi = window
    shown = [r for r in recs if r.end >= lo and r.start <= hi]
    bars: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in shown:
        bars[_key(r)].append((r.start * scale, (r.end - r.start) * scale))
    for key, spans in bars.items():
        _draw(ax, key, spans, chunks)
    recompute = _draw_recompute(ax, plan, shown, scale)
    _label_microbatches(ax, shown, scale, (hi - lo) * scale, width)
    return (recompute, any(r.stream == "compute" and r.name == "W" for r in recs),
            any(getattr(r, "fused", False) for r in recs))


def _title(result: Any, scale: float, unit: str) -> str:
    """The run, its bubble and its step: the bars are the ideal replay; the result's step
    adds the expected waits for the slowest peers, which no bar shows."""
    ideal = result.step_time_ideal_s or result.step_time_s
    title = (run_title(result, "Pipeline timeline")
             + f", bubble {result.breakdown_s['bubble'] / ideal * 100:.1f}% of "
               f"{ideal * scale:.4g} {unit} as replayed")
    if result.step_time_s > ideal:
        title += f" ({result.step_time_s * scale:.4g} {unit} expected)"
    return title


def _key(r: Any) -> tuple:
    if r.stream == "compute":
        return ("compute", r.stage, r.name, r.chunk, bool(getattr(r, "fused", False)))
    if r.stream == "optimizer":
        return ("compute", r.stage, "optimizer", 0, False)
    return ("comm", r.stage, "pp" if r.stream == "pp" else r.name, 0, False)


def _draw(ax: Any, key: tuple, spans: list[tuple[float, float]], chunks: int) -> None:
    lane, stage, what, chunk, fused = key
    off, h = LANE[lane]
    if lane == "comm":
        color = COMM_COLORS.get(what, COLORS["dp"])
    elif what == "optimizer":
        color = to_rgb(COLORS["optimizer"])
    else:
        base = {"F": COLORS["forward"], "W": WGRAD_COLOR}.get(what, COLORS["backward"])
        color = chunk_color(base, chunk, chunks)
    # Transfers are often far shorter than a pixel: outline them in their own colour
    # so each still shows as a hairline; F&B halves get a black outline.
    edge = "black" if fused else ("white" if lane == "compute" else color)
    ax.broken_barh(spans, (stage + off, h), facecolors=color, edgecolor=edge,
                   linewidth=0.6 if fused or lane != "compute" else 0.3)


def _draw_recompute(ax: Any, plan: Any, recs: list, scale: float) -> bool:
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    share: dict[tuple[int, int], float] = {}
    for r in recs:
        if r.stream != "compute" or r.name != "B":
            continue
        f = share.setdefault((r.stage, r.chunk), recompute_share(plan, r.stage, r.chunk))
        if f > 0:
            spans[r.stage].append((r.start * scale, (r.end - r.start) * f * scale))
    off, h = LANE["compute"]
    for stage, sp in spans.items():
        ax.broken_barh(sp, (stage + off, h), facecolors="none", hatch="////",
                       edgecolor=COLORS["recompute"], linewidth=0.0)
    return bool(spans)


def _label_microbatches(ax: Any, recs: list, scale: float, span: float, width: float) -> None:
    """Micro-batch number in each phase bar that is wide enough to hold it."""
    points_per_unit = width * 72 * 0.8 / span
    off, h = LANE["compute"]
    for r in recs:
        if r.stream != "compute":
            continue
        text = str(r.mb + 1)
        if (r.end - r.start) * scale * points_per_unit < 5.5 * len(text) + 2:
            continue
        ax.text((r.start + r.end) / 2 * scale, r.stage + off + h / 2, text, ha="center",
                va="center", fontsize=6.5, color="white")


def _legend(chunks: int, recompute: bool, has_w: bool = False, fused: bool = False
            ) -> list[Patch]:
    items = [Patch(color=COLORS["forward"], label="forward"),
             Patch(color=COLORS["backward"],
                   label="backward (input grad, B)" if has_w else "backward")]
    if has_w:
        items.append(Patch(color=WGRAD_COLOR, label="weight grad (W)"))
    if fused:
        items.append(Patch(facecolor="white", edgecolor="black",
                           label="F&B: overlapped pair"))
    if chunks > 1:
        items.append(Patch(color=chunk_color(COLORS["forward"], chunks - 1, chunks),
                           label=f"lighter: later chunk (of {chunks})"))
    if recompute:
        items.append(Patch(facecolor="none", edgecolor=COLORS["recompute"], hatch="////",
                           label="recompute share"))
    items += [Patch(color=COLORS["optimizer"], label="optimizer step"),
              Patch(color=COLORS["pp"], label="PP send (thin lane)"),
              Patch(color=COLORS["dp"], label="DP grad sync"),
              Patch(color=COLORS["param_gather"], label="param all-gather")]
    return items
