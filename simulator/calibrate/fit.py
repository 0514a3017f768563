"""Fit one stage's constants: bounded least squares, identification, leave-one-out error.

For a :class:`~.problems.Problem` the constants are fitted jointly (:func:`.lsq.solve`, in
log space inside :data:`.problems.BOUNDS`); every constant the data do not identify
(:func:`.lsq.identified`) goes back to its base value and the rest are refitted, until all
that remain are identified. The leave-one-out error of each point is its relative error when
the identified constants are refitted without it (at most :data:`LOO_MAX` points, evenly
spaced, to keep big nccl-tests sets quick).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import lsq
from .problems import Problem

LOO_MAX = 48
REJECT = 0.25  # fixing a constant at its base may worsen the RMS error by this much


@dataclass
class StageFit:
    """Result of one stage: fitted values (all of the stage's constants), what was identified."""

    stage: str
    values: dict[str, float]
    base: dict[str, float]
    identified: dict[str, bool]
    log_se: dict[str, float]
    at_bound: dict[str, bool]
    residuals: list[float]  # pred / measured - 1 at the fit
    loo: list[float] = field(default_factory=list)  # pred / measured - 1, left out
    loo_index: list[int] = field(default_factory=list)
    n: int = 0
    weak: dict[str, bool] = field(default_factory=dict)  # identified only jointly

    @property
    def loo_rms(self) -> float | None:
        """RMS of the leave-one-out errors; None when there are too few points to leave one
        out (no more measurements than identified constants)."""
        e = self.loo
        return math.sqrt(sum(x * x for x in e) / len(e)) if e else None

    @property
    def loo_text(self) -> str:
        r = self.loo_rms
        return f"{r:.1%}" if r is not None else f"n/a ({self.n} measurements: none to spare)"

    @property
    def max_abs_residual(self) -> float:
        return max((abs(x) for x in self.residuals), default=0.0)


def _objective(problem: Problem, names: list[str], fixed: dict[str, float],
               measured: np.ndarray, mask: np.ndarray):
    def f(x: np.ndarray) -> np.ndarray:
        values = {**fixed, **dict(zip(names, np.exp(x), strict=True))}
        pred = problem.predict(values)
        return np.log(pred[mask] / measured[mask])
    return f


def _solve(problem: Problem, free: list[str], values: dict[str, float],
           bounds: dict[str, tuple[float, float]], measured: np.ndarray, iterations: int
           ) -> tuple[dict[str, float], dict[str, float], float]:
    """Fit ``free`` with the other constants at ``values``: (values, log s.e., RMS log error)."""
    fixed = {p: values[p] for p in problem.params if p not in free}
    if not free:
        r = np.log(problem.predict(fixed) / measured)
        return dict(values), {}, float(np.sqrt(np.mean(r * r)))
    lo = np.log([bounds[p][0] for p in free])
    hi = np.log([bounds[p][1] for p in free])
    f = _objective(problem, free, fixed, measured, np.ones(measured.size, bool))
    res = lsq.solve(f, np.log([values[p] for p in free]), lo, hi, iterations)
    ses = lsq.log_standard_errors(res.jac, res.residuals)
    rms = float(np.sqrt(np.mean(res.residuals ** 2)))
    return ({**values, **dict(zip(free, np.exp(res.x).tolist(), strict=True))},
            dict(zip(free, ses.tolist(), strict=True)), rms)


def fit_stage(problem: Problem, start: dict[str, float], base: dict[str, float],
              bounds: dict[str, tuple[float, float]], iterations: int = 40,
              loo_iterations: int = 8, loo: bool = True) -> StageFit:
    """Fit ``problem.params`` from ``start``; unidentified ones return to ``base``.

    The constant with the largest standard error above :data:`.lsq.MAX_LOG_SE` is tried at
    its base value (the rest refitted); if that worsens the RMS error by more than
    :data:`REJECT` (relative) the data reject the base value and the constant stays fitted,
    *weakly identified* (a correlated group the data pin down together); else it stays at
    its base value, unidentified, and the next one is tried.
    """
    measured = problem.measured
    free = list(problem.params)
    values, se, rms = _solve(problem, free, {p: start[p] for p in problem.params}, bounds,
                             measured, iterations)
    weak: set[str] = set()
    while True:
        bad = [p for p in free if p not in weak and not se[p] < lsq.MAX_LOG_SE]
        if not bad:
            break
        worst = max(bad, key=lambda p: se[p])
        trial = [p for p in free if p != worst]
        t_values, t_se, t_rms = _solve(problem, trial, {**values, worst: base[worst]}, bounds,
                                       measured, iterations)
        if t_rms > rms * (1 + REJECT) + 1e-3:
            weak.add(worst)
            continue
        free, values, rms = trial, t_values, t_rms
        se = {**t_se, worst: math.inf}
    weak = {p for p in weak if p in free and not se.get(p, math.inf) < lsq.MAX_LOG_SE}
    pred = problem.predict(values)
    out = StageFit(stage=problem.stage, values=values, base=dict(base),
                   identified={p: p in free for p in problem.params},
                   log_se={p: se.get(p, math.inf) if p in free else math.inf
                           for p in problem.params},
                   at_bound={p: p in free and (math.isclose(values[p], bounds[p][0], rel_tol=1e-6)
                                               or math.isclose(values[p], bounds[p][1],
                                                               rel_tol=1e-6))
                             for p in problem.params},
                   residuals=(pred / measured - 1).tolist(), n=int(measured.size),
                   weak={p: p in weak for p in problem.params})
    if loo and free and measured.size > len(free):
        _leave_one_out(out, problem, free, bounds, measured, loo_iterations)
    return out


def _leave_one_out(out: StageFit, problem: Problem, free: list[str],
                   bounds: dict[str, tuple[float, float]], measured: np.ndarray,
                   iterations: int) -> None:
    n = measured.size
    idx = np.unique(np.linspace(0, n - 1, min(n, LOO_MAX)).round().astype(int))
    fixed = {p: out.values[p] for p in problem.params if p not in free}
    lo = np.log([bounds[p][0] for p in free])
    hi = np.log([bounds[p][1] for p in free])
    x0 = np.log([out.values[p] for p in free])
    for i in idx:
        mask = np.ones(n, bool)
        mask[i] = False
        res = lsq.solve(_objective(problem, free, fixed, measured, mask), x0, lo, hi,
                        iterations)
        values = {**fixed, **dict(zip(free, np.exp(res.x), strict=True))}
        out.loo.append(float(problem.predict(values)[i] / measured[i] - 1))
        out.loo_index.append(int(i))
