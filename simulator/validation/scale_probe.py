"""Probe: which missing physical effect could make weakly scaled steps grow more?

:mod:`.scale_fit` explains the measured step growth of the scale groups with three noise
constants; four groups stay outside 2 pp held out, Nemotron-4 340B on H100 among them
(it grows about twice the fit in BF16 and FP8). This module tests candidate effects that
the one-step model lacks and that grow with the data-parallel degree. Each candidate adds
``term(end, theta)`` seconds to the expected step of a group's smallest and largest end
(additive, outside the jitter: a first-order view of an engine change) and is fitted
jointly with the three noise constants, leave-one-group-out as in :mod:`.scale_fit`;
``theta`` runs on the candidate's grid (a single value: nothing fitted). The features
come from one engine replay per end (the stage that ends the step, its records):

* ``optimizer_floor``: the optimizer step as ``max(F, memory-bound step)``, as if host
  launch work that does not shrink with DP (grad-norm and found-inf reductions, clip,
  per-bucket kernel launches) bounded it; ``theta = F`` (s). The model's step is 30 B per
  local parameter at HBM bandwidth plus one kernel launch
  (:func:`simulator.compute.optimizer_time`), sharded over DP, so it falls (340B H100:
  29 -> 1.8 ms) while the overlap charge of the gradient buckets rises (31 -> 62 ms).
* ``param_gather_slowdown``: the engine slows the compute by ``gpu.comm_overlap_slowdown``
  (0.18 on H100, sourced in the topology; Hong et al. 2025, arXiv:2507.03114, measure a
  mean 18.9 % and a maximum 40 % compute slowdown under overlapped collectives) for the
  gradient buckets that run beside the backward, not for the parameter all-gather hidden
  under the next step's forwards; this adds it. Nothing fitted.
* ``overlap_slowdown_tail``: the above, and the bucket slowdown and the DP stream's own
  tail past the pipeline end added instead of overlapped (``max(now, end) + s * ov``
  instead of ``max(now, end + s * ov)``). Nothing fitted.
* ``dp_overlap_slowdown``: one slowdown ``theta`` for all DP traffic hidden under compute
  (buckets and parameter all-gather), fitted within the measured range 0.18-0.40 (Hong
  et al. 2025) in place of the engine's 0.18 for the buckets.
* ``dp_exposed``: ``theta`` times the DP wire time per step (gradient buckets plus
  parameter all-gather, one pass each), on top of what the engine charges; a ring moves
  ``(n-1)/n`` of the bytes, so at fixed work per GPU this roughly doubles from DP 2 to
  DP 32. ``theta`` free in 0-1: the fraction of DP time the step pays beyond the engine.
* ``dp_exposed_at_slowdown``: the same with ``theta`` set to the topology's
  ``comm_overlap_slowdown`` (not fitted); as a model it charges the buckets' slowdown
  twice (0.36 of them) and the gather's once.
* ``nic_contention``: the PP point-to-point sends share the GPU's one 400 Gb/s NIC with
  the DP collectives (rail-optimised DGX H100), while the engine gives them separate
  links. With the DP traffic spread evenly, a fraction ``f = DP wire time / step`` of the
  sends runs at half bandwidth: ``f`` times the step's sensitivity to doubling every p2p
  time (one extra replay). Nothing fitted (an upper bound for an even spread).
* ``spine_p2p``: the PP sends of a job that spans the top switching tier (more than one
  DGX SuperPOD scalable unit of 32 nodes) run ``1 + theta`` times slower (flow
  collisions in the spine); the topology's spine is non-blocking, so ``theta`` should be
  0 there; the fit says how much the data would want. Linear in the doubling replay.
* ``slow_nodes``: persistently slow nodes (stragglers that health checks miss), each node
  slow with probability ``f`` and then ``1 + d`` times slower; one slow node paces the
  whole synchronous step, so the expected step gains ``(1 - (1 - f)^J) * d * step`` on a
  job of ``J`` nodes (first order in ``d``: :func:`.variability.expected_step` replays the
  slow case exactly). It saturates in ``J``, unlike the jitter's ``sqrt(2 ln N)``, and is
  the one candidate that also predicts a spread between two runs of the same job (whether
  the job drew a slow node), as the replicates show. ``theta = (f, d)`` on a grid.
* ``barrier_proportional`` and ``barrier_diffusive``: the FP8 amax barrier's wait grows
  with the time since the previous barrier instead of being a constant host-side delay
  per barrier (these two replace ``sync_noise_s``, held at 0). Each replica drifts while
  it computes, and the barrier waits for the most drifted of its ``n`` replicas:
  proportionally to the phase (a per-phase rate error, ``theta * sqrt(2 ln n)`` per
  second of phase) or as a random walk (``theta * sqrt(2 ln n) * sqrt(phase)``). Summed
  over the critical path that is ``theta * g * S`` and ``theta * g * sqrt(S * K)``, with
  ``S`` the step's derivative in a uniform scaling of every phase (one extra replay) and
  ``K`` the barrier phases on the critical path. The constant model charges a pipeline
  with twice the chunks (VP 12 against VP 6) twice the waits; these charge the same
  (proportional) or sqrt 2 times (random walk), as the two GPT-3 175B FP8 groups (VP 12,
  VP 6) suggest by growing alike.

Run (about 20 s)::

    PYTHONPATH=$PWD python -m simulator.validation.scale_probe
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..engine import ListRecorder, run_engine
from ..metrics.variability import perturb, replay
from .scale_fit import (
    HOST_NOISE_S,
    SIGMAS,
    SYNC_NOISE_S,
    Endpoint,
    Group,
    growth_table,
    predicted,
    scale_groups,
)

TOLERANCE_PP = 2.0
PHASE_EPS = 0.01  # relative step of every phase for the phases' share of the step


@dataclass(frozen=True)
class EndFeatures:
    """What the candidates need from one end's replay (s), at the stage that ends the step."""

    step_s: float
    dp_wire_s: float  # gradient buckets + parameter all-gather, one pass each
    gather_hidden_s: float  # parameter all-gather hidden under the next forwards
    buckets_overlapped_s: float  # gradient-bucket time beside the backward (ov)
    tail_hidden_s: float  # what max(now, end + s * ov) hides of max(now, end) + s * ov
    optimizer_s: float
    p2p_doubling_s: float  # step(every p2p x 2) - step
    spans_top_tier: bool  # PP sends cross the top tier of a 3-tier fabric
    slowdown: float  # gpu.comm_overlap_slowdown of the end's topology
    job_nodes: int = 1  # nodes of the whole job
    phase_sens_s: float = 0.0  # d step / d ln(every phase's time): the phases' share
    barrier_phases: float = 0.0  # barrier phases on the critical path (0: no barrier)
    barrier_g: float = 0.0  # sqrt(2 ln n) over the barrier's n replicas (0: no barrier)


def end_features(end: Endpoint) -> EndFeatures:
    """Replay the end with records (the direct engine: same times as the plain run)."""
    inp = end.inp
    run = run_engine(inp, ListRecorder(), engine="direct")
    s = max(range(len(run.stages)), key=lambda i: run.stages[i].end)
    st = run.stages[s]
    syncs = [r for r in run.records if r.stage == s and r.name == "grad_sync"]
    now = max((r.end for r in syncs), default=0.0)
    overlapped = sum(max(0.0, min(r.end, st.pipeline_end) - r.start) for r in syncs)
    sl = inp.overlap_slowdown
    tail = max(now, st.pipeline_end) + sl * overlapped - st.grads_synced
    ag = float(inp.param_gather[s])
    buckets = sum(sum(c) for c in inp.dp_buckets[s])
    doubled = replay(replace(inp, p2p=inp.p2p * 2.0)) - run.step_time
    up = np.full(inp.fwd.shape, 1.0 + PHASE_EPS)
    sens = (replay(perturb(inp, up, up, np.ones(inp.fwd.shape[0]))) - run.step_time) / PHASE_EPS
    n = end.var.barrier_peers
    phases = end.replay(0.0)[1] if n > 1 else 0.0
    return EndFeatures(step_s=run.step_time, dp_wire_s=buckets + ag,
                       gather_hidden_s=ag - st.param_gather_exposed,
                       buckets_overlapped_s=overlapped, tail_hidden_s=tail,
                       optimizer_s=st.optimizer, p2p_doubling_s=doubled,
                       spans_top_tier=end.pp_span >= 2, slowdown=sl,
                       job_nodes=end.var.job_nodes, phase_sens_s=sens,
                       barrier_phases=phases,
                       barrier_g=math.sqrt(2.0 * math.log(n)) if n > 1 else 0.0)


@dataclass(frozen=True)
class Candidate:
    name: str
    grid: tuple[float, ...]  # theta values; one value: nothing fitted
    term: Callable[[EndFeatures, float], float]  # seconds added to the end's step
    # True: the term replaces the constant barrier noise (``sync_noise_s`` held at 0)
    replaces_sync_noise: bool = False


CANDIDATES = (
    Candidate("none", (0.0,), lambda f, t: 0.0),
    Candidate("optimizer_floor", (0.0, 0.005, 0.01, 0.02, 0.03),
              lambda f, t: max(t, f.optimizer_s) - f.optimizer_s),
    Candidate("param_gather_slowdown", (1.0,), lambda f, t: f.slowdown * f.gather_hidden_s),
    Candidate("overlap_slowdown_tail", (1.0,),
              lambda f, t: f.slowdown * f.gather_hidden_s + f.tail_hidden_s),
    Candidate("dp_overlap_slowdown", tuple(np.round(np.linspace(0.18, 0.40, 12), 3)),
              lambda f, t: (t - f.slowdown) * f.buckets_overlapped_s + t * f.gather_hidden_s),
    Candidate("dp_exposed", tuple(np.round(np.linspace(0.0, 1.0, 21), 3)),
              lambda f, t: t * f.dp_wire_s),
    Candidate("dp_exposed_at_slowdown", (1.0,), lambda f, t: f.slowdown * f.dp_wire_s),
    Candidate("nic_contention", (1.0,), lambda f, t: f.dp_wire_s / f.step_s * f.p2p_doubling_s),
    Candidate("spine_p2p", tuple(np.round(np.linspace(0.0, 3.0, 31), 3)),
              lambda f, t: t * f.p2p_doubling_s if f.spans_top_tier else 0.0),
    Candidate("slow_nodes", tuple(itertools.product((1e-4, 3e-4, 1e-3, 2e-3, 5e-3),
                                                    (0.02, 0.05, 0.1, 0.15))),
              lambda f, t: (1.0 - (1.0 - t[0]) ** f.job_nodes) * t[1] * f.step_s),
    Candidate("barrier_proportional", tuple(np.round(np.linspace(0.0, 0.02, 41), 4)),
              lambda f, t: t * f.barrier_g * f.phase_sens_s, replaces_sync_noise=True),
    Candidate("barrier_diffusive", tuple(np.round(np.linspace(0.0, 0.004, 41), 5)),
              lambda f, t: t * f.barrier_g * math.sqrt(f.phase_sens_s * f.barrier_phases),
              replaces_sync_noise=True),
)


@dataclass(frozen=True)
class ProbeResult:
    name: str
    theta: float | tuple[float, ...]  # fitted on all groups
    fitted: bool  # False: the candidate has one value, nothing fitted
    rows: list[dict]  # per group: measured, held-out prediction (pp), held-out theta


def probe(groups: list[Group], table: np.ndarray, feats: list[tuple[EndFeatures, EndFeatures]],
          cand: Candidate, mus: np.ndarray = HOST_NOISE_S, nus: np.ndarray = SYNC_NOISE_S
          ) -> ProbeResult:
    """Fit ``cand`` with the noise constants on all groups and leave-one-group-out."""
    meas = np.array([g.measured_growth for g in groups])
    n = len(groups)
    best_all = (np.inf, 0.0)
    held = [(np.inf, 0.0, 0.0)] * n  # (sse of the others, prediction, theta)
    for theta in cand.grid:
        extra = tuple(np.array([cand.term(f[end], theta) for f in feats]) for end in (0, 1))
        pred = predicted(table, groups, mus, nus, extra)
        err2 = (pred - meas[:, None, None, None]) ** 2
        total = err2.sum(axis=0)
        if total.min() < best_all[0]:
            best_all = (float(total.min()), _theta(theta))
        for k in range(n):
            others = total - err2[k]
            i = np.unravel_index(int(np.argmin(others)), others.shape)
            if others[i] < held[k][0]:
                held[k] = (float(others[i]), float(pred[(k, *i)]), _theta(theta))
    rows = [{"group": g.name, "measured_pp": 100 * meas[k], "held_out_pp": 100 * held[k][1],
             "held_out_theta": held[k][2]} for k, g in enumerate(groups)]
    return ProbeResult(cand.name, best_all[1], len(cand.grid) > 1, rows)


def _theta(theta) -> float | tuple[float, ...]:
    """A grid point as plain floats (a tuple for a candidate with several parameters)."""
    return tuple(float(x) for x in theta) if isinstance(theta, tuple) else float(theta)


def outside(res: ProbeResult) -> set[str]:
    return {r["group"] for r in res.rows
            if abs(r["held_out_pp"] - r["measured_pp"]) > TOLERANCE_PP}


def render(results: list[ProbeResult]) -> str:
    base = outside(results[0])
    lines = ["| candidate | theta (all groups) | within 2 pp held out | mean abs error | "
             "max abs error | brought inside | pushed outside |",
             "|---|---:|---:|---:|---:|---|---|"]
    for res in results:
        err = [abs(r["held_out_pp"] - r["measured_pp"]) for r in res.rows]
        out = outside(res)
        theta = ("not fitted" if not res.fitted else
                 ", ".join(f"{x:g}" for x in res.theta) if isinstance(res.theta, tuple)
                 else f"{res.theta:g}")
        lines.append(f"| {res.name} | {theta} | {len(res.rows) - len(out)} / "
                     f"{len(res.rows)} | {np.mean(err):.2f} pp | {max(err):.1f} pp | "
                     f"{', '.join(sorted(base - out)) or '-'} | "
                     f"{', '.join(sorted(out - base)) or '-'} |")
    return "\n".join(lines)


def run_all(groups: list[Group] | None = None, sigmas: np.ndarray = SIGMAS
            ) -> list[ProbeResult]:
    groups = groups if groups is not None else scale_groups()
    table = growth_table(groups, sigmas)
    feats = [(end_features(g.small), end_features(g.large)) for g in groups]
    return [probe(groups, table, feats, c,
                  nus=np.zeros(1) if c.replaces_sync_noise else SYNC_NOISE_S)
            for c in CANDIDATES]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)
    results = run_all()
    print(render(results))
    for res in results[1:]:
        print(f"\n{res.name}: " + ", ".join(
            f"{r['group']} {r['held_out_pp'] - r['measured_pp']:+.1f}" for r in res.rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
