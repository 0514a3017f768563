"""Fit the variability constants to the measured step growth of weakly scaled jobs.

A *scale group* is a group of dense step-time cases whose rows run
the same model and plan at different GPU counts with fixed work per GPU: only
``parallelism.data`` and ``training.global_batch_size`` change, in proportion. The
measured step grows from the smallest to the largest scale by 0 to +10 %
(validation/analysis.md, item 2); the one-step model alone predicts 0 to +0.8 %.

The growth of a group is ``E[step(largest)] / E[step(smallest)] - 1`` with the expected
step of :func:`simulator.metrics.variability.expected_step`. Three constants are
fitted by least squares on the growth in percentage points, one value for every group:
``reliability.jitter_sigma`` (a multiplicative, per-GPU effect),
``reliability.host_noise_s`` (an additive, per-node effect once per step) and
``reliability.sync_noise_s`` (an additive, per-GPU effect at every in-phase barrier: the
FP8 delayed-scaling amax all-reduce, so it only acts on the FP8 groups, and most on those
with many short chunks). Sigma runs on a grid, each point two engine replays per case
(the expected step, and its secant slope in a delay added to every phase, taken at a
barrier noise of 0.1 ms: the step is piecewise linear in that delay, about the number of
phases on the critical path, less where the delay hides communication);
the two additive constants enter in closed form on fine grids. Slow nodes stay at the
topology's value (0 for these health-checked benchmark clusters).

The groups come from the step-time validation (``validation/dense_step_time*.yaml``) and
from ``validation/scaling/``: weak-scaling series of later software releases, used for their
growth only (:data:`SCALING_DIR`). Groups of two releases that run the same model,
precision and plan over the same GPU counts are *replicates* (:func:`replicates`): two
measurements of one growth, whose spread bounds what any model can match.

Cross-validation is leave-one-group-out: each group's growth is predicted with constants
fitted on the other groups only. Run::

    PYTHONPATH=$PWD python -m simulator.validation.scale_fit            # fit + LOGO table
    PYTHONPATH=$PWD python -m simulator.validation.scale_fit --sigmas 0:0.06:13
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..api import resolve
from ..hardware import Topology
from ..metrics.variability import Variability, expected_step, harmonic
from ..workload.plan import build_plan
from .cases import DEFAULT_DIR, Case, load_cases

SCALE_KEYS = {"parallelism.data", "training.global_batch_size"}
# Weak-scaling series of later software releases, kept out of the step-time validation
# (validation/scaling/README.md): a release's absolute step reflects its software, on
# which the compute constants were not fitted; its growth with scale is what they test.
SCALING_DIR = DEFAULT_DIR / "scaling"
SIGMAS = np.linspace(0.0, 0.06, 13)
HOST_NOISE_S = np.linspace(0.0, 0.05, 201)
SYNC_NOISE_S = np.linspace(0.0, 0.5e-3, 51)
SLOPE_PROBE_S = 1e-4  # sync noise of the slope replay (s): the secant is exact there


@dataclass
class Endpoint:
    """One end (smallest or largest scale) of a group, ready to replay."""

    case: Case
    inp: object  # EngineInput
    var: Variability
    pp_span: int = 0  # outermost switching tier the PP sends cross (0: scale-up domain)
    plan_key: tuple = ()  # model, precision and plan, without the data-parallel degree

    def replay(self, sigma: float) -> tuple[float, float]:
        """(expected step without host and barrier terms (s), its secant slope in the
        barrier wait per phase between no wait and the probe's, in phases (0 without a
        barrier))."""
        v = replace(self.var, sigma=sigma, host_noise_s=0.0, sync_noise_s=0.0)
        step = expected_step(self.inp, v)
        if self.var.barrier_peers <= 1:
            return step, 0.0
        probe = expected_step(self.inp, replace(v, sync_noise_s=SLOPE_PROBE_S))
        return step, (probe - step) / (SLOPE_PROBE_S * self.barrier_harmonic)

    @property
    def gpus(self) -> int:
        return self.var.peers * self.inp.fwd.shape[0]

    @property
    def harmonic(self) -> float:
        return harmonic(self.var.job_nodes)

    @property
    def barrier_harmonic(self) -> float:
        """H_n of the phase barrier's n peers (0 without a barrier)."""
        n = self.var.barrier_peers
        return harmonic(n) if n > 1 else 0.0


@dataclass
class Group:
    name: str
    small: Endpoint
    large: Endpoint
    later_release: bool = False  # from validation/scaling/, not the step-time validation

    @property
    def measured_growth(self) -> float:
        return self.large.case.measured / self.small.case.measured - 1.0


def _endpoint(case: Case) -> Endpoint:
    w, t = resolve(case.spec["workload"], case.topology, case.spec["overrides"],
                   case.topology_overrides)
    plan = build_plan(w, Topology.from_config(t))
    p, tr = w.parallelism, w.training
    key = (w.model.name, w.model.num_layers, w.model.seq_length, tr.precision, p.tensor,
           p.pipeline, p.context, p.virtual_pipeline, tr.micro_batch_size, case.topology)
    return Endpoint(case=case, inp=plan.engine_input, var=Variability.of(w, t),
                    pp_span=plan.groups["pp"].span, plan_key=key)


def _fixed_work(cases: list[Case]) -> bool:
    """Same model and plan, only DP and global batch changing, in proportion, over at least
    two data-parallel sizes (a group of reruns at one size, e.g. several releases, is not a
    scale group)."""
    if len(cases) < 2 or any(set(c.spec["overrides"]) - SCALE_KEYS for c in cases):
        return False
    base = cases[0].spec["workload"]
    dps = [c.spec["overrides"].get("parallelism.data", base["parallelism"]["data"])
           for c in cases]
    ratios = {c.spec["overrides"].get("training.global_batch_size",
                                      base["training"]["global_batch_size"]) / dp
              for c, dp in zip(cases, dps, strict=True)}
    return len(ratios) == 1 and len(set(dps)) > 1


def scale_groups(directory: str | None = None, scaling: str | bool = True
                 ) -> list[Group]:
    """Every scale group of the dense step-time cases, endpoints built: those of
    ``directory`` (default ``validation/``), then those of ``scaling`` (default
    ``validation/scaling/`` where it holds files; ``False``: none)."""
    groups = _groups(load_cases(directory), later_release=False)
    if scaling is not False:
        root = SCALING_DIR if scaling is True else scaling
        if Path(root).is_dir() and any(Path(root).glob("*.yaml")):
            groups += _groups(load_cases(root), later_release=True)
    return groups


def _groups(cases: list[Case], later_release: bool) -> list[Group]:
    by_group: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        if c.category == "dense_step_time":
            by_group[c.group].append(c)
    groups = []
    for name, members in by_group.items():
        if not _fixed_work(members):
            continue
        ends = [_endpoint(c) for c in (members[0], members[-1])]
        ends.sort(key=lambda e: e.gpus)
        groups.append(Group(name, ends[0], ends[1], later_release))
    return groups


def growth_table(groups: list[Group], sigmas: np.ndarray) -> np.ndarray:
    """Replays: ``[group, sigma, end, (step s, critical-path phases)]``."""
    return np.array([[[g.small.replay(s), g.large.replay(s)] for s in sigmas]
                     for g in groups])


def predicted(table: np.ndarray, groups: list[Group], mu: np.ndarray, nu: np.ndarray,
              extra: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Growth ``[group, sigma, mu, nu]`` for every sigma of the table, host noise ``mu``
    and barrier noise ``nu`` (s); ``extra``: seconds added to each group's (smallest,
    largest) step, a candidate effect of :mod:`.scale_probe` (none by default)."""
    def step(end: int, attr: str) -> np.ndarray:
        h = np.array([getattr(g, attr).harmonic for g in groups])[:, None, None, None]
        hb = np.array([getattr(g, attr).barrier_harmonic
                       for g in groups])[:, None, None, None]
        base = table[:, :, end, 0][:, :, None, None]
        slope = table[:, :, end, 1][:, :, None, None]
        add = 0.0 if extra is None else np.asarray(extra[end])[:, None, None, None]
        return base + mu[None, None, :, None] * h + slope * hb * nu[None, None, None, :] + add
    return step(1, "large") / step(0, "small") - 1.0


def best(err2: np.ndarray, mask: np.ndarray) -> tuple[int, int, int]:
    """(sigma, mu, nu) indices minimising the squared growth error over ``mask``."""
    sse = err2[mask].sum(axis=0)
    i, j, k = np.unravel_index(int(np.argmin(sse)), sse.shape)
    return int(i), int(j), int(k)


@dataclass(frozen=True)
class FitResult:
    sigma: float
    host_noise_s: float
    sync_noise_s: float
    rows: list[dict]  # per group: measured, fitted-on-all and held-out predictions (pp)


def fit(groups: list[Group], sigmas: np.ndarray = SIGMAS, mus: np.ndarray = HOST_NOISE_S,
        nus: np.ndarray = SYNC_NOISE_S) -> FitResult:
    """Fit on all groups, and leave-one-group-out predictions for each."""
    table = growth_table(groups, sigmas)
    pred = predicted(table, groups, mus, nus)
    meas = np.array([g.measured_growth for g in groups])
    err2 = (pred - meas[:, None, None, None]) ** 2
    everyone = np.ones(len(groups), bool)
    i, j, k = best(err2, everyone)
    rows = []
    for n, g in enumerate(groups):
        li, lj, lk = best(err2, everyone & (np.arange(len(groups)) != n))
        rows.append({"group": g.name, "gpus": (g.small.gpus, g.large.gpus),
                     "barrier": g.small.var.barrier_peers > 1,
                     "later_release": g.later_release,
                     "measured_pp": 100 * meas[n], "model_alone_pp": 100 * pred[n, 0, 0, 0],
                     "fitted_pp": 100 * pred[n, i, j, k], "held_out_pp": 100 * pred[n, li, lj, lk],
                     "held_out_sigma": float(sigmas[li]),
                     "held_out_host_noise_s": float(mus[lj]),
                     "held_out_sync_noise_s": float(nus[lk])})
    return FitResult(float(sigmas[i]), float(mus[j]), float(nus[k]), rows)


@dataclass(frozen=True)
class Replicate:
    """Two groups of different releases that run one model, precision and plan over the
    same GPU range: their measured growths are two measurements of one quantity."""

    first: str
    second: str
    gpus: tuple[int, int]
    growth_pp: tuple[float, float]

    @property
    def spread_pp(self) -> float:
        return abs(self.growth_pp[0] - self.growth_pp[1])


def replicates(groups: list[Group]) -> list[Replicate]:
    """Pairs of groups with the same plan key and the same smallest and largest scale."""
    out = []
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            ends = (a.small.gpus, a.large.gpus)
            if a.small.plan_key == b.small.plan_key and ends == (b.small.gpus, b.large.gpus):
                out.append(Replicate(a.name, b.name, ends,
                                     (100 * a.measured_growth, 100 * b.measured_growth)))
    return out


def replicate_sd_pp(reps: list[Replicate]) -> float:
    """Standard deviation of one measured growth (pp), from replicate pairs: the difference
    of two measurements of one quantity has variance 2 sd^2, so ``sd = rms(spread) / sqrt 2``."""
    spreads = np.array([r.spread_pp for r in reps])
    return float(np.sqrt(np.mean(spreads ** 2) / 2.0))


def outside_by_noise(sd_pp: float, tolerance_pp: float = 2.0) -> float:
    """Share of groups a perfect model would still miss by more than ``tolerance_pp`` when
    each measured growth carries normal noise of ``sd_pp``: ``2 Phi(-tol / sd)``."""
    return math.erfc(tolerance_pp / (sd_pp * math.sqrt(2.0)))


def within(rows: list[dict], tolerance_pp: float = 2.0) -> tuple[int, int]:
    """(groups within ``tolerance_pp`` held out, groups)."""
    ok = sum(abs(r["held_out_pp"] - r["measured_pp"]) <= tolerance_pp for r in rows)
    return ok, len(rows)


def render(res: FitResult, groups: list[Group] | None = None) -> str:
    """The fit as Markdown: constants, counts within 2 pp held out, the per-group table
    and, given the groups, the replicate pairs."""
    ok, n = within(res.rows)
    lines = [f"fitted on all groups: jitter_sigma = {res.sigma:.4f}, "
             f"host_noise_s = {res.host_noise_s:.5f}, sync_noise_s = {res.sync_noise_s:.6f}",
             "", f"within 2 pp held out: {ok} of {n} groups"]
    later = [r for r in res.rows if r["later_release"]]
    if later:
        ok_v, n_v = within([r for r in res.rows if not r["later_release"]])
        ok_l, n_l = within(later)
        lines[-1] += (f" ({ok_v} of {n_v} step-time validation groups, {ok_l} of {n_l} "
                      "later-release groups of validation/scaling/)")
    lines += ["", "| group | GPUs | amax barrier | measured | one-step model | fitted | "
              "held out (LOGO) | LOGO error |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in res.rows:
        lines.append(f"| {r['group']} | {r['gpus'][0]} -> {r['gpus'][1]} | "
                     f"{'yes' if r['barrier'] else 'no'} | "
                     f"{r['measured_pp']:+.1f} % | {r['model_alone_pp']:+.1f} % | "
                     f"{r['fitted_pp']:+.1f} % | {r['held_out_pp']:+.1f} % | "
                     f"{r['held_out_pp'] - r['measured_pp']:+.1f} pp |")
    reps = replicates(groups) if groups else []
    if reps:
        lines += ["", "Replicates: one model, precision and plan over the same GPUs, measured "
                  "in two releases.", "",
                  "| group | replicate | GPUs | measured growth | replicate's | spread |",
                  "|---|---|---|---:|---:|---:|"]
        for rep in reps:
            lines.append(f"| {rep.first} | {rep.second} | {rep.gpus[0]} -> {rep.gpus[1]} | "
                         f"{rep.growth_pp[0]:+.1f} % | {rep.growth_pp[1]:+.1f} % | "
                         f"{rep.spread_pp:.1f} pp |")
        sd = replicate_sd_pp(reps)
        rest = sorted(reps, key=lambda r: r.spread_pp)[:-1]
        sd_rest = replicate_sd_pp(rest) if rest else sd
        lines += ["", f"One measured growth carries a standard deviation of {sd:.1f} pp "
                  f"(rms spread / sqrt 2; {sd_rest:.1f} pp without the widest pair). At "
                  f"{sd_rest:.1f} to {sd:.1f} pp a model that predicted every expected growth "
                  f"exactly would still miss the 2 pp bar on "
                  f"{100 * outside_by_noise(sd_rest):.0f} to {100 * outside_by_noise(sd):.0f} % "
                  f"of the groups ({n * outside_by_noise(sd_rest):.1f} to "
                  f"{n * outside_by_noise(sd):.1f} of {n})."]
    return "\n".join(lines)


def _grid(text: str) -> np.ndarray:
    """``lo:hi:n`` -> n evenly spaced values from lo to hi (argparse type: a bad grid is a
    one-line usage error, exit 2)."""
    try:
        lo, hi, n = text.split(":")
        lo_f, hi_f, count = float(lo), float(hi), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: must be lo:hi:n, e.g. 0:0.06:13") from None
    if not (np.isfinite(lo_f) and np.isfinite(hi_f)) or not 0 <= lo_f <= hi_f or count < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: needs finite 0 <= lo <= hi and n >= 1")
    return np.linspace(lo_f, hi_f, count)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sigmas", type=_grid, default="0:0.06:13", help="sigma grid lo:hi:n")
    ap.add_argument("--host-noise", type=_grid, default="0:0.05:201",
                    help="host noise grid lo:hi:n (s)")
    ap.add_argument("--sync-noise", type=_grid, default="0:0.0005:51",
                    help="barrier noise grid lo:hi:n (s)")
    args = ap.parse_args(argv)
    groups = scale_groups()
    print(render(fit(groups, args.sigmas, args.host_noise, args.sync_noise), groups))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
