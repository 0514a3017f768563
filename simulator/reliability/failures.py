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
    if math.isinf(tau):
        tau, delta = work, 0.0  # one segment: the whole run
    m = 1.0 / rate
    try:
        return m * math.exp(restart / m) * math.expm1((tau + delta) / m) * work / tau
    except OverflowError:  # segments far longer than the MTBF never finish
        return math.inf


@dataclass(frozen=True)
class RunDraw:
    """One Monte-Carlo run: wall time (s) and interruptions by cause."""

    wall_s: float
    interruptions: dict[str, int]


def simulate_run(work: float, tau: float, delta: float, restart: float,
                 rates: dict[str, float], rng: np.random.Generator) -> RunDraw:
    """One seeded run: Poisson failures strike anywhere (also during a restart); work since
    the last completed checkpoint is lost. Iterates once per failure, not per checkpoint."""
    total = sum(rates.values())
    counts = dict.fromkeys(rates, 0)
    if total == 0.0:
        return RunDraw(expected_wall(work, tau, delta, restart, 0.0), counts)
    if math.isinf(tau):
        tau, delta = work, 0.0
    causes, p = list(rates), np.array(list(rates.values())) / total
    seg = tau + delta
    done = wall = 0.0
    while done < work:
        gap = rng.exponential(1.0 / total)
        left = work - done
        full = math.floor(left / tau)  # segments with a checkpoint; the last has none
        need = full * seg + (left - full * tau)
        if gap >= need:
            return RunDraw(wall + need, counts)
        k = min(full, math.floor(gap / seg))
        done += k * tau
        wall += gap
        counts[causes[int(rng.choice(len(causes), p=p))]] += 1
        while True:  # the restart itself may be interrupted
            g = rng.exponential(1.0 / total)
            if g >= restart:
                wall += restart
                break
            wall += g
            counts[causes[int(rng.choice(len(causes), p=p))]] += 1
    return RunDraw(wall, counts)


def run_rng(seed: int, run: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(RUN_STREAM, 0, run)))
