"""Variability inside a step: a synchronous step waits for its slowest participant.

The engine simulates one pipeline stage for all the GPUs that do the same work in
lockstep (its TP x CP x DP x EP peers, ``N = num_gpus / pp`` of them). On a real
cluster those peers do not take exactly the same time: each GPU's phase time carries a
small random factor (clock and power management, thermal state, OS noise, NCCL
progress), some nodes are persistently slow, and each node adds host-side noise to
every step (Python, data loading, launch queues). Whenever the peers meet at a
collective the group proceeds at the pace of the slowest one, so what the engine must
replay is the *maximum* over N draws, and that maximum grows with N:
``E[max of N] ~ sigma * sqrt(2 ln N)`` for normal draws. This is why the measured step
of a weakly scaled job grows with the GPU count (validation/analysis.md, item 2).

Three effects, all from ``topology.reliability`` (units: fractions and seconds):

* **per-GPU jitter**: a GPU's phase time is ``t * exp(sigma * Z)``, Z standard normal,
  independent per GPU and phase; the stage's phase takes ``t * max_N exp(sigma Z)``.
  The maximum is drawn directly from its distribution ``Phi(z)^N`` (inverse CDF on a
  grid), so the cost does not grow with N.
* **slow nodes**: each node is slow (``1 + slowdown`` times slower) with probability
  ``fraction`` (drawn per Monte-Carlo step: a planner does not know which nodes the job
  gets); a stage whose ``k`` nodes include one slow node runs slow, which happens with
  probability ``1 - (1 - fraction)^k``.
* **host noise**: each of the job's ``J`` nodes adds an exponential delay of mean
  ``host_noise_s`` to the step; the step waits for the largest, whose mean is
  ``host_noise_s * H_J`` (H the harmonic number; Renyi's representation of
  exponential order statistics).
* **barrier noise**: some recipes put a job-wide barrier inside every phase. FP8 with
  delayed scaling (Megatron-Core ``--fp8-recipe delayed``, its default) all-reduces the
  amaxes of every FP8 tensor over the stage's TP x DP x CP group when a model chunk's
  ``fp8_autocast`` exits (Megatron-Core TransformerBlock passes
  ``get_amax_reduction_group(with_context_parallel=True)`` as TE's ``fp8_group``; TE
  reduces at the exit of the forward and again in the backward), so each forward and
  backward phase ends at a barrier of the whole group instead of only its TP group. The TP
  ranks of one replica arrive together: they have just met at the chunk's last TP
  collective (the FC2 reduce-scatter or all-reduce, Megatron-Core row-parallel linear), so
  the group's ``n`` independent arrivals are its DP x CP replicas. Each arrives an
  exponential ``sync_noise_s`` late on average (kernel launch queue, Python, OS noise:
  host-side, so not proportional to the phase), and the barrier waits for the last:
  ``sync_noise_s * H_n`` per phase. This is why FP8 jobs with many short
  chunks (deep interleaved pipelines) grow more with scale than the same job in BF16
  (validation/analysis.md, item 2). Current-scaling, MXFP8 and blockwise recipes, and
  ``--tp-only-amax-red``, reduce inside the TP (x CP) group or not at all.

Two views of the same model: :func:`expected_step` replays the *expected* factors once
(deterministic; the step every :func:`simulator.simulate` reports, and the one the GPU
constants are fitted against: docs/architecture.md, item 8; exact for the host term, and
a first-order value for the pipeline, which is convex in its phase times so the
Monte-Carlo mean can be slightly higher); :func:`sample_steps` replays seeded draws, one
engine run per step, for the percentiles. Both perturb the public
:class:`~simulator.engine.EngineInput` (phase arrays and optimizer) and replay it with
:func:`~simulator.engine.run_engine`; with all three effects zero they return the engine's
own step bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..config import TopologyConfig, Workload
from ..engine import EngineInput, NullRecorder, run_engine

STEP_STREAM = 0x5354  # SeedSequence spawn-key tag of the step draws ("ST")
_Z = np.linspace(-9.0, 12.0, 8401)  # grid of standard-normal values for max-of-N tables
_PDF = np.exp(-0.5 * _Z**2) / math.sqrt(2.0 * math.pi)


@lru_cache(maxsize=1)
def _log_phi() -> np.ndarray:
    """log Phi(z) on the grid ``_Z`` (built on first use: every ``simulate`` imports this
    module, and the table costs a few milliseconds)."""
    return np.log(np.array([0.5 * math.erfc(-z / math.sqrt(2.0)) for z in _Z]))


@dataclass(frozen=True)
class Variability:
    """The variability of one configuration: its constants and how many peers sync."""

    sigma: float  # log-normal sigma of one GPU's phase time
    slow_fraction: float  # probability that a node is slow
    slowdown: float  # a slow node takes (1 + slowdown) times as long
    host_noise_s: float  # mean per-node host delay per step, s
    peers: int  # GPUs one simulated stage stands for (num_gpus / pp)
    stage_nodes: int  # nodes those peers occupy
    job_nodes: int  # nodes of the whole job
    sync_noise_s: float = 0.0  # mean per-GPU arrival delay at an in-phase barrier, s
    barrier_peers: int = 1  # independent arrivals at every phase's barrier (1: none)

    @property
    def zero(self) -> bool:
        return (self.sigma == 0 and self.host_noise_s == 0 and self.barrier_s == 0
                and (self.slow_fraction == 0 or self.slowdown == 0))

    @property
    def barrier_s(self) -> float:
        """Expected wait at one phase's barrier, s: ``sync_noise_s * H_n`` (0 without one)."""
        if self.barrier_peers <= 1 or self.sync_noise_s == 0:
            return 0.0
        return self.sync_noise_s * harmonic(self.barrier_peers)

    @classmethod
    def of(cls, w: Workload, t: TopologyConfig) -> Variability:
        r, p = t.reliability, w.parallelism
        per_node = r.gpus_per_node or t.tiers[0].size
        peers = p.num_gpus // p.pipeline
        return cls(sigma=r.jitter_sigma, slow_fraction=r.slow_node_fraction,
                   slowdown=r.slow_node_slowdown, host_noise_s=r.host_noise_s, peers=peers,
                   stage_nodes=-(-peers // per_node), job_nodes=-(-p.num_gpus // per_node),
                   sync_noise_s=r.sync_noise_s, barrier_peers=amax_group(w))

    @property
    def slow_probability(self) -> float:
        """Probability that a stage's nodes include a slow one: 1 - (1 - f)^k."""
        return 1.0 - (1.0 - self.slow_fraction) ** self.stage_nodes


def replay(inp: EngineInput) -> float:
    """Step time (s) of one replay, records not kept (the engine's fast path)."""
    return run_engine(inp, NullRecorder()).step_time


@lru_cache(maxsize=1024)
def expected_max_lognormal(sigma: float, n: int) -> float:
    """E[max of n i.i.d. exp(sigma Z)], Z standard normal:
    the integral of ``e^{sigma z} n phi(z) Phi(z)^{n-1}`` over z (trapezoid on a grid)."""
    if sigma == 0:
        return 1.0
    dens = n * _PDF * np.exp((n - 1) * _log_phi())
    return float(np.trapezoid(np.exp(sigma * _Z) * dens, _Z))


def amax_group(w: Workload) -> int:
    """Independent arrivals at the amax all-reduce closing every phase: the reduction group
    (Megatron-Core parallel_state ``get_amax_reduction_group``: the stage's TP x DP x CP
    ranks for FP8 delayed scaling, TP x CP with ``tp_only_amax_red``) over TP, whose ranks
    arrive together from the chunk's last TP collective; 1 (no barrier) for other
    precisions and recipes. Counting the TP ranks as separate arrivals gave the same growth
    with scale but charged deep FP8 pipelines ~2x more in absolute terms, against their
    measured FP8 speed-ups (FP8 objective 0.00118 -> 0.00092 on H100, 0.00181 -> 0.00115
    on GB200, reports/validation.md)."""
    p, tr = w.parallelism, w.training
    if tr.fp8_recipe not in tr.precision_type.job_wide_amax:
        return 1
    if tr.tp_only_amax_red:
        return p.context
    return p.num_gpus // p.pipeline // p.tensor


def harmonic(n: int) -> float:
    """H_n = 1 + 1/2 + ... + 1/n: the mean of the largest of n unit exponentials."""
    return float(np.sum(1.0 / np.arange(1, n + 1)))


@lru_cache(maxsize=256)
def _max_cdf(n: int) -> np.ndarray:
    """CDF of the largest of n standard normals on the grid ``_Z``: Phi(z)^n."""
    return np.exp(n * _log_phi())


def max_normal_quantile(n: int, u: np.ndarray) -> np.ndarray:
    """z such that P(max of n standard normals <= z) = u (inverse CDF on the grid)."""
    return np.interp(u, _max_cdf(n), _Z)


def perturb(inp: EngineInput, fwd: np.ndarray, bwd: np.ndarray, stage: np.ndarray,
            wait_f: np.ndarray | float = 0.0, wait_b: np.ndarray | float = 0.0
            ) -> EngineInput:
    """The engine input with phases scaled by ``fwd`` / ``bwd`` (shaped like the phase
    arrays), barrier waits ``wait_f`` / ``wait_b`` (s) added to them, and the optimizer
    scaled by the per-stage factor ``stage``."""
    return replace(inp, fwd=inp.fwd * fwd + wait_f, bwd=inp.bwd * bwd + wait_b,
                   optimizer=inp.optimizer * stage)


def expected_step(inp: EngineInput, v: Variability) -> float:
    """Step time (s) with every factor at its expectation: deterministic.

    Jitter: each phase scaled by E[max of N]. Barrier noise: ``sync_noise_s * H_n``
    added to each phase. Slow nodes: a mixture of two replays, none slow and all slow,
    weighted by the probability that the job has a slow node at all (a slow stage paces
    a pipeline, so one slow node slows the whole step). Host noise: its exact mean
    ``host_noise_s * H_J``."""
    if v.zero:
        return replay(inp)
    jit = expected_max_lognormal(v.sigma, v.peers)
    step = replay(expected_input(inp, v, jit))
    p_any = 1.0 - (1.0 - v.slow_fraction) ** v.job_nodes
    if p_any > 0 and v.slowdown > 0:
        step = (1.0 - p_any) * step + p_any * replay(
            expected_input(inp, v, jit * (1.0 + v.slowdown)))
    return step + host_term(v)


def expected_input(inp: EngineInput, v: Variability, factor: float | None = None
                   ) -> EngineInput:
    """The engine input with every phase and the optimizer scaled by ``factor`` (default:
    the jitter's E[max of N], no slow node) and the expected barrier wait added to every
    phase: what :func:`expected_step` replays. The replay keeps each stage's order of
    steps, so its step never falls when a phase grows: a lower bound on this input's step
    (the plan search's) bounds the expected step too, less :func:`host_term`."""
    factor = expected_max_lognormal(v.sigma, v.peers) if factor is None else factor
    wait = v.barrier_s
    stage = np.full(inp.fwd.shape[0], factor)
    per = stage[:, None, None]
    return perturb(inp, np.broadcast_to(per, inp.fwd.shape),
                   np.broadcast_to(per, inp.bwd.shape), stage, wait, wait)


def host_term(v: Variability) -> float:
    """Expected host delay added to a step, s: ``host_noise_s * H_J`` over the job's J
    nodes."""
    return v.host_noise_s * harmonic(v.job_nodes)


def step_rng(seed: int, step: int) -> np.random.Generator:
    """The Generator of Monte-Carlo step ``step`` (independent of how many are drawn)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(STEP_STREAM, 0, step)))


def sample_step(inp: EngineInput, v: Variability, rng: np.random.Generator) -> float:
    """One step (s) with drawn jitter maxima, slow nodes and host noise."""
    stages = inp.fwd.shape[0]
    u_f, u_b = rng.random(inp.fwd.shape), rng.random(inp.bwd.shape)
    slow = rng.random(stages) < v.slow_probability
    u_h = rng.random()
    stage = 1.0 + v.slowdown * slow
    fwd = np.exp(v.sigma * max_normal_quantile(v.peers, u_f)) if v.sigma else np.ones_like(u_f)
    bwd = np.exp(v.sigma * max_normal_quantile(v.peers, u_b)) if v.sigma else np.ones_like(u_b)
    per = stage[:, None, None]
    wait_f = wait_b = 0.0
    if v.barrier_s:
        wait_f = max_exponential(v.sync_noise_s, v.barrier_peers, rng.random(inp.fwd.shape))
        wait_b = max_exponential(v.sync_noise_s, v.barrier_peers, rng.random(inp.bwd.shape))
    step = replay(perturb(inp, fwd * per, bwd * per, stage, wait_f, wait_b))
    host = float(max_exponential(v.host_noise_s, v.job_nodes, np.array(u_h)))
    return step + host


def max_exponential(mean: float, n: int, u: np.ndarray) -> np.ndarray:
    """Largest of ``n`` exponentials of mean ``mean`` (s) at probabilities ``u``, by
    inversion of its CDF ``(1 - exp(-x / mean))^n``."""
    if mean == 0:
        return np.zeros_like(u)
    return -mean * np.log(-np.expm1(np.log(np.maximum(u, 1e-300)) / n))


def sample_steps(inp: EngineInput, v: Variability, seed: int, steps: int) -> np.ndarray:
    """``steps`` seeded Monte-Carlo step times (s); step i always uses the same stream."""
    if v.zero:
        return np.full(steps, replay(inp))
    return np.array([sample_step(inp, v, step_rng(seed, i)) for i in range(steps)])


@dataclass(frozen=True)
class StepDistribution:
    """Step times of one configuration (s): ideal, expected, and Monte-Carlo percentiles."""

    ideal_s: float
    mean_s: float  # expected step: used for throughput
    p50_s: float
    p99_s: float
    mc_mean_s: float
    samples: int


def step_distribution(inp: EngineInput, v: Variability, seed: int, steps: int,
                      ideal_s: float | None = None) -> StepDistribution:
    """Ideal, expected and Monte-Carlo steps of ``inp``; ``ideal_s``: its ideal step (s)
    where the caller has already replayed it (saves one replay)."""
    ideal = replay(inp) if ideal_s is None else ideal_s
    draws = sample_steps(inp, v, seed, steps)
    return StepDistribution(ideal_s=ideal, mean_s=expected_step(inp, v),
                            p50_s=float(np.percentile(draws, 50)),
                            p99_s=float(np.percentile(draws, 99)),
                            mc_mean_s=float(draws.mean()), samples=steps)
