"""A per-case response surface of the prediction in the fitted GPU constants.

Cross-validation refits the GPU constants once per left-out group; doing that with the full
engine (a golden-section coordinate descent is ~100 objective evaluations, each a simulation
of every training case) takes tens of minutes on two cores. The refits only need the
prediction of each case *as a function of the constants*, and that function is smooth and
nearly linear in the reciprocal efficiencies: a GEMM takes ``flops / (peak * e *
prod_d d/(d+h))`` seconds, i.e. ``(1/e) * prod_d (1 + h/d)``, attention ``flops / (peak *
e_attn)``, and the engine adds overlap and bubble terms that bend it only mildly. So each case
is simulated at a small deterministic design inside the fitting box and a least-squares
surface is fitted in ``z = 1/e`` for efficiencies and ``z = h/h0`` for dimensions: every
linear and quadratic term, plus ``z_e * (h/h0)^2`` (the cubic of the GEMM shape factor).

The surface is used *only* to find the fold's constants. The cross-validated error is then
computed with the full simulator at those constants (:mod:`~simulator.validation.crossval`),
so a surrogate error can make a refit slightly sub-optimal but never flatters the reported
error. :attr:`Surface.fit_error` (max relative misfit on its own design) is reported.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .cases import Case
from .predict import predict


def _is_eff(name: str) -> bool:
    return name.endswith("efficiency")


def features(names: tuple[str, ...], ref: dict[str, float], x: np.ndarray) -> np.ndarray:
    """Feature matrix (rows: points) for constants ``x`` (columns in ``names`` order)."""
    z = np.stack([1.0 / x[:, i] if _is_eff(n) else x[:, i] / ref[n]
                  for i, n in enumerate(names)], axis=1)
    cols = [np.ones(len(x))] + [z[:, i] for i in range(len(names))]
    cols += [z[:, i] * z[:, j] for i, j in itertools.combinations_with_replacement(
        range(len(names)), 2)]
    dims = [i for i, n in enumerate(names) if not _is_eff(n)]
    cols += [z[:, e] * z[:, d] ** 2 for e in range(len(names)) if _is_eff(names[e])
             for d in dims]
    return np.stack(cols, axis=1)


def design(box: dict[str, tuple[float, float]], names: tuple[str, ...]) -> np.ndarray:
    """Deterministic design: the box's corners (a 2-level factorial; the 3^k grid when
    k <= 2), its face centres, its centre and quarter points along each axis."""
    lo = np.array([box[n][0] for n in names])
    hi = np.array([box[n][1] for n in names])
    k = len(names)
    levels = (0.0, 0.5, 1.0) if k <= 2 else (0.0, 1.0)
    pts = [np.array(p) for p in itertools.product(levels, repeat=k)]
    pts += [np.where(np.arange(k) == i, v, 0.5) for i in range(k) for v in (0.0, 1.0)]
    pts.append(np.full(k, 0.5))
    # quarter points along each axis: more points than surface terms, and the curvature
    pts += [np.where(np.arange(k) == i, v, 0.5) for i in range(k) for v in (0.25, 0.75)]
    unique = np.unique(np.round(np.array(pts), 6), axis=0)
    return lo + unique * (hi - lo)


@dataclass(frozen=True)
class Surface:
    """``predict(case, constants)`` approximated by a linear model in :func:`features`."""

    names: tuple[str, ...]
    ref: dict[str, float]
    coef: np.ndarray
    fit_error: float  # max |surface / simulated - 1| on the design points

    def __call__(self, constants: dict[str, float]) -> float:
        x = np.array([[constants[n] for n in self.names]])
        return float((features(self.names, self.ref, x) @ self.coef)[0])


def build_surface(case: Case, box: dict[str, tuple[float, float]],
                  fixed: dict[str, float] | None = None,
                  predictor: Callable[[Case, dict], float] = predict) -> Surface:
    """Simulate ``case`` on the design of ``box`` (constants in ``fixed`` held) and fit."""
    names = tuple(sorted(box))
    ref = {n: (box[n][0] + box[n][1]) / 2 for n in names}
    x = design(box, names)
    y = np.array([predictor(case, {**(fixed or {}), **dict(zip(names, row, strict=True))})
                  for row in x])
    a = features(names, ref, x)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    err = float(np.max(np.abs(a @ coef / y - 1.0)))
    return Surface(names, ref, coef, err)
