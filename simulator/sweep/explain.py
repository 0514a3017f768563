"""Why one plan beats another, in words, from their step-time breakdowns.

Every simulated step splits into compute, exposed communication per axis (TP,
CP, EP, PP, DP) and pipeline bubble, and these sum to the step time
(:class:`~simulator.metrics.Result` ``breakdown_s``). Comparing two plans
component by component says where the winner saves time: "38 ms less
pipeline bubble, 12 ms less exposed TP comm". Components that differ by less
than 0.2 % of the winner's step are left out; the largest component the winner
loses on is named with "despite", and a lighter recompute setting is named
because it is usually the reason compute shrank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .candidates import RECOMPUTE

LABELS = {
    "compute": "compute", "tp": "exposed TP comm", "cp": "exposed CP comm",
    "ep": "exposed EP comm", "pp": "pipeline transfer wait", "dp": "exposed DP comm",
    "bubble": "pipeline bubble",
}
THRESHOLD = 0.002  # of the winner's step time


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"


def why(a: Mapping[str, Any], b: Mapping[str, Any], name: str) -> str:
    """One line: how much faster ``a`` is than ``b`` (called ``name``) and where it saves."""
    speed = a["tokens_per_s"] / b["tokens_per_s"]
    floor = THRESHOLD * a["step_time_s"]
    deltas = {k: b[f"breakdown_s.{k}"] - a[f"breakdown_s.{k}"] for k in LABELS}
    gains = sorted(((d, k) for k, d in deltas.items() if d > floor), reverse=True)
    losses = sorted(((-d, k) for k, d in deltas.items() if -d > floor), reverse=True)
    parts = [f"{_ms(d)} less {LABELS[k]}" for d, k in gains[:3]]
    ra, rb = a.get("recompute"), b.get("recompute")
    if ra in RECOMPUTE and rb in RECOMPUTE and RECOMPUTE.index(ra) < RECOMPUTE.index(rb):
        parts.append(f"{ra} recompute instead of {rb}")
    if losses:
        d, k = losses[0]
        parts.append(f"despite {_ms(d)} more {LABELS[k]}")
    if not parts:
        parts.append("no component differs by more than 0.2 %")
    head = f"{speed:.2f}x {name}" if speed >= 1.5 else f"{(speed - 1) * 100:+.1f}% vs {name}"
    return f"{head}: " + ", ".join(parts)
