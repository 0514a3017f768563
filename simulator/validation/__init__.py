"""Validation against published measurements.

Cases live in the repository's ``validation/`` folder (YAML, one file per kind of
measurement, every number with its source). This package loads them
(:mod:`~simulator.validation.cases`), predicts each one with the simulator's public API
(:mod:`~simulator.validation.predict`), writes the accuracy report and its figures
(:mod:`~simulator.validation.report`, :mod:`~simulator.validation.figures`) and fits a GPU's
efficiency constants jointly on the training cases (:mod:`~simulator.validation.fit`).

>>> from simulator.validation import load_cases, run_cases
>>> rows = run_cases(load_cases(categories=["collective_busbw"]))
>>> all(abs(r.error) < 0.15 for r in rows)
True
"""

from .cases import CATEGORIES, Case, load_cases, mark_holdout, narayanan_flops, precision
from .predict import predict
from .report import BARS, Row, check_bars, render_markdown, run_cases, summarize, write_report

__all__ = [
    "BARS", "CATEGORIES", "Case", "Row", "check_bars", "load_cases", "mark_holdout",
    "narayanan_flops", "precision", "predict", "render_markdown", "run_cases", "summarize",
    "write_report",
]
