"""Widening of the step-time interval for a topology without training measurements.

A small hook, kept apart from :mod:`simulator.metrics.uncertainty` (which derives the
interval from cross-validated residuals): a topology whose ``calibration.status`` is
``uncalibrated`` (datasheet peaks, efficiencies carried from another GPU or estimated)
multiplies the interval's log half-width by its ``calibration.interval_scale`` (>= 1), so
``[t e^-q, t e^q]`` becomes ``[t e^-sq, t e^sq]``, and its note reaches ``clustersim run``.
"""

from __future__ import annotations

import math


def widen(step_s: float, low: float | None, high: float | None, scale: float
          ) -> tuple[float | None, float | None]:
    """``(low, high)`` (s) with each log distance from ``step_s`` multiplied by ``scale``."""
    if low is None or high is None or scale == 1.0 or step_s <= 0:
        return low, high
    return (step_s * math.exp(scale * math.log(low / step_s)),
            step_s * math.exp(scale * math.log(high / step_s)))


def notes(note: str, scale: float) -> list[str]:
    """The lines ``run`` prints for an uncalibrated topology (none otherwise)."""
    if not note:
        return []
    return [note + (f" (interval widened x{scale:g} in log space)" if scale != 1.0 else "")]
