"""Bounded nonlinear least squares in log space (numpy only), and what the data identify.

Residuals are ``r_i = log(pred_i / measured_i)`` (relative error, symmetric); parameters
move in ``x = log(p)`` inside ``[log lo, log hi]``. The step is Levenberg-Marquardt
(Marquardt 1963) on a forward-difference Jacobian, projected onto the bounds; a parameter
pinned at a bound with its gradient pointing outward leaves the active set (a projected
Gauss-Newton variant, Bertsekas 1982). Deterministic: no random starts.

Identification: with ``J`` the Jacobian ``d r_i / d log p_j`` at the optimum and ``s`` the
residual standard deviation (floored at 1 %, capped at 5 %), the covariance of ``log p`` is
``s^2 (J^T J)^-1`` (Gauss-Newton / Fisher approximation); a constant is *identified* when
some measurement moves by at least :data:`MIN_SENSITIVITY` per unit log change of it and its
standard error is below :data:`MAX_LOG_SE` (10 % relative).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

MIN_SENSITIVITY = 0.02
MAX_LOG_SE = 0.1
SIGMA_FLOOR = 0.01
SIGMA_CAP = 0.05
STEP = 1e-4  # forward-difference step in log p


@dataclass
class Fit:
    x: np.ndarray  # log parameters
    residuals: np.ndarray
    jac: np.ndarray
    iterations: int


def jacobian(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, r0: np.ndarray,
             hi: np.ndarray) -> np.ndarray:
    """Forward differences (backward at the upper bound), columns d r / d x_j."""
    jac = np.empty((r0.size, x.size))
    for j in range(x.size):
        h = STEP if x[j] + STEP <= hi[j] else -STEP
        xp = x.copy()
        xp[j] += h
        jac[:, j] = (f(xp) - r0) / h
    return jac


def solve(f: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, lo: np.ndarray,
          hi: np.ndarray, iterations: int = 40, tol: float = 1e-10) -> Fit:
    """Minimise ``sum f(x)^2`` over ``lo <= x <= hi`` from ``x0`` (clipped into the box)."""
    x = np.clip(np.asarray(x0, float), lo, hi)
    r = f(x)
    cost = float(r @ r)
    lam = 1e-3
    jac = jacobian(f, x, r, hi)
    it = 0
    for it in range(1, iterations + 1):  # noqa: B007 (the count is returned)
        grad = jac.T @ r
        free = ~(((x <= lo) & (grad > 0)) | ((x >= hi) & (grad < 0)))
        if not free.any():
            break
        improved = False
        for _ in range(12):
            jf = jac[:, free]
            a = jf.T @ jf
            step = np.zeros_like(x)
            step[free] = -np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), jf.T @ r)
            xn = np.clip(x + step, lo, hi)
            rn = f(xn)
            cn = float(rn @ rn)
            if cn < cost:
                improved = cost - cn > tol * max(cost, 1e-30)
                x, r, cost = xn, rn, cn
                lam = max(lam / 3, 1e-9)
                break
            lam *= 4
        if not improved:
            break
        jac = jacobian(f, x, r, hi)
    return Fit(x=x, residuals=r, jac=jac, iterations=it)


def log_standard_errors(jac: np.ndarray, residuals: np.ndarray) -> np.ndarray:
    """Standard error of each log parameter, ``inf`` where J^T J is singular in it."""
    n, p = jac.shape
    dof = max(n - p, 1)
    # the residual spread, floored (noise-free data) and capped (a misfit the model cannot
    # follow, such as a protocol switch, must not un-identify every constant)
    sigma = min(max(float(np.sqrt(residuals @ residuals / dof)), SIGMA_FLOOR), SIGMA_CAP)
    a = jac.T @ jac
    ridge = 1e-9 * max(float(np.trace(a)), 1e-30)  # collinear columns: huge variance
    try:
        cov = np.linalg.inv(a + ridge * np.eye(p))
    except np.linalg.LinAlgError:
        return np.full(p, np.inf)
    diag = np.diag(cov)
    se = sigma * np.sqrt(np.clip(diag, 0, None))
    null = np.abs(jac).max(axis=0) < MIN_SENSITIVITY if n else np.ones(p, bool)
    se[null] = np.inf
    return se


def identified(jac: np.ndarray, residuals: np.ndarray) -> np.ndarray:
    """Boolean per parameter: sensitive enough and well determined (see module doc)."""
    return log_standard_errors(jac, residuals) < MAX_LOG_SE
