"""Failures, checkpoints and restarts: from a step time to an expected wall-clock time.

A synchronous job stops whenever any of its components fails: a GPU, a node, a network
link, or the software stack. Failures are taken as independent Poisson processes
(constant hazard), so the job's interruption rate is the sum of the per-component rates
times the component counts (``topology.reliability``; per GPU-day, node-day, link-day,
and GPU-day for software). After an interruption the job restarts (``restart_s`` plus
reading the last checkpoint) and redoes the work done since that checkpoint.

Checkpointing every ``tau`` seconds of work at a blocking cost ``delta`` trades checkpoint
overhead against lost work. Young (1974) gives the optimal interval
``tau = sqrt(2 delta M)`` for a mean time between failures M; Daly (2006, "A higher order
estimate of the optimum checkpoint interval for restart dumps", FGCS 22, Eq. 37) refines it
to ``tau = sqrt(2 delta M) [1 + sqrt(delta/(2M))/3 + (delta/(2M))/9] - delta`` for
``delta < 2M`` and ``tau = M`` otherwise. The expected wall time to finish ``W`` seconds
of work (Daly 2006, Eq. 20, failures possible during restart too) is::

    T = M exp(R/M) (exp((tau + delta)/M) - 1) W / tau

which tends to ``W + delta W / tau`` without failures and is increasing in the failure
rate 1/M for every tau (so more failures never shorten training). Without failures no
checkpoint is needed (the optimal interval is infinite) and ``T = W`` exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import TopologyConfig

DAY = 86400.0
CAUSES = ("gpu", "node", "link", "software")
RUN_STREAM = 0x5255  # SeedSequence spawn-key tag of the Monte-Carlo runs ("RU")


def interruption_rates(t: TopologyConfig, num_gpus: int) -> dict[str, float]:
    """Expected interruptions per day of a job on ``num_gpus`` GPUs, by cause (a job stops
    whenever any of its GPUs, nodes or links fails, or software on any rank does)."""
    r = t.reliability
    nodes = -(-num_gpus // (r.gpus_per_node or t.tiers[0].size))
    return {"gpu": r.gpu_failures_per_gpu_day * num_gpus,
            "node": r.node_failures_per_node_day * nodes,
            "link": r.link_failures_per_gpu_day * num_gpus,
            "software": r.software_failures_per_gpu_day * num_gpus}


def young_interval(delta: float, mtbf: float) -> float:
    """Young (1974): ``sqrt(2 delta M)`` seconds of work between checkpoints."""
    return math.sqrt(2.0 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly (2006, Eq. 37): the higher-order optimum interval (s); infinite without failures."""
    if math.isinf(mtbf):
        return math.inf
    if delta >= 2.0 * mtbf:
        return mtbf
    x = delta / (2.0 * mtbf)
    return young_interval(delta, mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def expected_wall(work: float, tau: float, delta: float, restart: float, rate: float) -> float:
    """Daly (2006, Eq. 20): expected wall time (s) to finish ``work`` s of computation,
    checkpointing every ``tau`` s at cost ``delta``, restarting in ``restart`` s, with
    ``rate`` interruptions per second."""
    if rate == 0.0:
        return work + (0.0 if math.isinf(tau) else delta * work / tau)
    if math.isinf(tau) or tau >= work:
        tau, delta = work, 0.0  # one segment, the whole run: no checkpoint is ever taken
    m = 1.0 / rate
    try:
        return m * math.exp(restart / m) * math.expm1((tau + delta) / m) * work / tau
    except OverflowError:  # segments far longer than the MTBF never finish
        return math.inf


EXACT_DRAWS = 1_000_000  # failure-time draws over all runs past which sums are approximated
HUGE_COUNT = 1e12  # expected interruptions per run past which counts are approximated too


@dataclass(frozen=True)
class RunDraws:
    """Monte-Carlo runs: wall time (s) and interruptions by cause, one entry per run, and
    how they were drawn (``exact``, or the approximation used past a threshold)."""

    wall_s: np.ndarray
    interruptions: dict[str, np.ndarray]
    method: str


def trunc_exp_moments(rate: float, length: float) -> tuple[float, float]:
    """Mean and variance (s, s^2) of an exponential time (``rate`` per s) given that it
    is shorter than ``length`` s: the time lost by an attempt a failure cuts short."""
    a = rate * length
    if a < 1e-4:  # series: uniform on [0, length) to second order (no cancellation)
        return length * (0.5 - a / 12.0), length * length * (1.0 / 12.0 - a * a / 720.0)
    if a > 700.0:  # exp(-a) underflows: the truncation no longer matters
        return 1.0 / rate, 1.0 / rate**2
    # e^a / (e^a - 1)^2 = 1 / (2 sinh(a/2))^2, which does not overflow where (e^a - 1)^2 does
    return (1.0 / rate - length / math.expm1(a),
            1.0 / rate**2 - (length / (2.0 * math.sinh(a / 2.0))) ** 2)


def _fail_counts(rng: np.random.Generator, attempts: np.ndarray | float, rate: float,
                 length: float, runs: int) -> np.ndarray:
    """Failed attempts before ``attempts`` successes of ``length`` s each: negative
    binomial with success probability exp(-rate length); normal past HUGE_COUNT."""
    n = np.broadcast_to(np.asarray(attempts, dtype=float), (runs,))
    if length <= 0.0 or rate == 0.0:
        return np.zeros(runs)
    p = math.exp(-rate * length)
    mean = n * math.expm1(rate * length)  # n (1 - p) / p
    if float(mean.max()) > HUGE_COUNT:  # relative spread 1/sqrt(mean) < 1e-6: the mean
        return mean.copy()
    out = np.zeros(runs)
    some = n > 0
    out[some] = rng.negative_binomial(n[some], p)
    return out


def _lost_time(rng: np.random.Generator, counts: np.ndarray, rate: float, length: float,
               exact: bool) -> np.ndarray:
    """Sum, per run, of ``counts`` times cut short (exponential below ``length``): exact
    inverse-CDF draws, or a gamma with the same mean and variance (``exact=False``)."""
    if length <= 0.0 or not counts.any():
        return np.zeros(len(counts))
    if exact:
        idx = np.repeat(np.arange(len(counts)), counts.astype(np.int64))
        u = rng.random(len(idx))
        x = -np.log1p(u * math.expm1(-rate * length)) / rate
        return np.bincount(idx, weights=x, minlength=len(counts))
    mean, var = trunc_exp_moments(rate, length)
    out = counts * mean  # past HUGE_COUNT the relative spread is below 1e-6: the mean
    some = (counts > 0) & (counts <= HUGE_COUNT)
    out[some] = rng.gamma(counts[some] * mean * mean / var, var / mean)
    return out


def simulate_runs(work: float, tau: float, delta: float, restart: float,
                  rates: dict[str, float], rng: np.random.Generator, runs: int) -> RunDraws:
    """``runs`` seeded runs at once: Poisson failures strike anywhere (also during a
    restart); work since the last completed checkpoint is lost.

    Each checkpoint segment (``tau + delta`` s; the last, partial one has no checkpoint)
    is retried until one attempt outlives it, so its failures are geometric and a run's
    are negative binomial; each failure costs the time it cut short (an exponential below
    the segment's length) plus a restart, itself retried the same way. Counts are drawn
    exactly; the times cut short are drawn one by one up to :data:`EXACT_DRAWS` draws in
    all, past which each run's sum is a gamma of the same mean and variance (a sum of
    thousands of bounded times: the central limit theorem). The mean is Daly's Eq. 20
    either way (:func:`expected_wall`). Cost: O(runs + min(failures, EXACT_DRAWS)).
    """
    total = sum(rates.values())
    causes = list(rates)
    if total == 0.0:
        wall = expected_wall(work, tau, delta, restart, 0.0)
        return RunDraws(np.full(runs, wall), {c: np.zeros(runs) for c in causes}, "exact")
    if math.isinf(tau) or tau >= work:
        tau, delta = work, 0.0  # as expected_wall: one segment, no checkpoint
    full = math.floor(work / tau)
    last, seg = work - full * tau, tau + delta
    if total * max(seg, last, restart) > 700.0:  # exp() overflows: no segment ever completes
        return RunDraws(np.full(runs, math.inf), {c: np.full(runs, math.inf) for c in causes},
                        "none: a segment is over 700 mean times between failures long, "
                        "so the run never finishes")
    k_full = _fail_counts(rng, full, total, seg, runs)
    k_last = _fail_counts(rng, 1.0 if last > 0 else 0.0, total, last, runs)
    fails = k_full + k_last
    k_restart = _fail_counts(rng, fails, total, restart, runs)
    drawn = float(fails.sum() + k_restart.sum())
    exact = drawn <= EXACT_DRAWS
    wall = (full * seg + last + restart * fails
            + _lost_time(rng, k_full, total, seg, exact)
            + _lost_time(rng, k_last, total, last, exact)
            + _lost_time(rng, k_restart, total, restart, exact))
    n = fails + k_restart
    p = np.array([rates[c] for c in causes]) / total
    exact_split = drawn < 2**62  # else in proportion: counts past int64
    split = rng.multinomial(n.astype(np.int64), p) if exact_split else n[:, None] * p[None, :]
    method = "exact" if exact else (
        f"approximate: {drawn:.3g} failure-time draws over {EXACT_DRAWS:,}, so each run's "
        "lost time is a gamma of the same mean and variance")
    return RunDraws(wall, {c: split[:, i].astype(float) for i, c in enumerate(causes)}, method)


def run_rng(seed: int) -> np.random.Generator:
    """The Monte-Carlo runs' generator (one stream for all runs, drawn vectorised)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(RUN_STREAM, 1)))
