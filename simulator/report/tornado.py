"""Tornado figure: how far the step time moves when each hardware constant moves.

One horizontal bar per constant, the largest effect on top. A bar spans the step-time change
(%) between the constant at ``1 - step`` and ``1 + step`` of its value
(:func:`simulator.sensitivity.sensitivity`); the darker half is the ``+step`` side. Constants
that move the step time by less than ``min_effect`` are left out and counted in the title.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .figures import close, new_figure, save_figure, wrap_title

MIN_EFFECT = 0.001  # 0.1 % of the step time


def tornado_figure(rows: Sequence[Any], base_step_s: float, title: str, path: str | Path,
                   step: float = 0.1, top: int = 15, min_effect: float = MIN_EFFECT,
                   labels: dict[str, str] | None = None) -> Path:
    """Write the tornado chart of ``rows`` (:class:`~simulator.sensitivity.Elasticity`)."""
    shown = [r for r in rows if max(abs(r.step_time_low_s / base_step_s - 1),
                                    abs(r.step_time_high_s / base_step_s - 1)) >= min_effect]
    hidden = len(rows) - len(shown[:top])
    shown = shown[:top][::-1]  # largest on top
    fig, ax = new_figure(7.5, 1.2 + 0.32 * max(len(shown), 1))
    for i, r in enumerate(shown):
        lo = (r.step_time_low_s / base_step_s - 1) * 100
        hi = (r.step_time_high_s / base_step_s - 1) * 100
        ax.barh(i, lo, color="#9ecae1", edgecolor="#3182bd")
        ax.barh(i, hi, color="#3182bd", edgecolor="#08519c")
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([(labels or {}).get(r.name, r.name) for r in shown])
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel(f"step time change, % (light: constant -{step:.0%}, dark: +{step:.0%})")
    ax.set_title(wrap_title(f"{title}\nstep time {base_step_s:.3g} s; {hidden} constants "
                            f"below {min_effect:.1%} not shown", 7.5), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    out = save_figure(fig, path)
    close(fig)
    return out
