"""What a case's stated recipe unknowns allow: its prediction under each plausible value.

A source often leaves a setting open that has few possible values: the attention backend
a PyTorch nightly picked, the micro-batch size of a paper's run, whether a table row ran
its own plan or its recipe's preset. A case lists them under ``plausible:`` (group or row;
:func:`simulator.validation.cases.load_cases`), and the reports show the error at each and
the range they span with the stated assumption. The range is context for the error, never
a way to choose: every summary and bar stays on the stated assumption.
"""

from __future__ import annotations

from typing import Any

from .cases import Case
from .predict import plausible_range


def spread(case: Case, predicted: float) -> dict[str, Any] | None:
    """``{"plausible": label -> error, "low": .., "high": ..}`` for a case with plausible
    alternatives (errors as ``predicted / measured - 1``; the range includes the stated
    assumption's ``predicted``), None without any (or where none would fit)."""
    alts = {label: p / case.measured - 1.0 for label, p in plausible_range(case)}
    if not alts:
        return None
    err = predicted / case.measured - 1.0
    return {"plausible": alts, "low": min(err, *alts.values()),
            "high": max(err, *alts.values())}


def render(entries: list[tuple[str, float, dict[str, Any]]]) -> list[str]:
    """Markdown section from ``(case id, stated error, spread)`` entries; empty without."""
    if not entries:
        return []
    inside = sum(s["low"] <= 0.0 <= s["high"] for _, _, s in entries)
    lines = ["## What the stated unknowns allow", "",
             "Where a source leaves a setting open and its plausible values are few (the "
             "case's `plausible:`), each is predicted too. The error above stays the "
             "stated assumption's; this range is not used to choose. Measured inside the "
             f"range: {inside} of {len(entries)}.", "",
             "| case | stated assumption | alternatives | range | measured inside |",
             "| --- | ---: | --- | --- | --- |"]
    for cid, err, s in entries:
        alts = "; ".join(f"{k}: {100 * e:+.1f} %" for k, e in s["plausible"].items())
        lines.append(f"| {cid} | {100 * err:+.1f} % | {alts} | "
                     f"{100 * s['low']:+.1f} .. {100 * s['high']:+.1f} % | "
                     f"{'yes' if s['low'] <= 0.0 <= s['high'] else 'no'} |")
    return [*lines, ""]
