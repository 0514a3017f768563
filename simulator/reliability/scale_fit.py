"""Fit the variability constants to the measured step growth of weakly scaled jobs.

A *scale group* is a validation group (validation/dense_step_time*.yaml) whose rows run
the same model and plan at different GPU counts with fixed work per GPU: only
``parallelism.data`` and ``training.global_batch_size`` change, in proportion. The
measured step grows from the smallest to the largest scale by +1 to +10 %
(validation/analysis.md, item 2); the one-step model alone predicts 0 to +0.8 %.

The growth of a group is ``E[step(largest)] / E[step(smallest)] - 1`` with the expected
step of :func:`simulator.reliability.variability.expected_step`. Two constants are fitted,
``reliability.jitter_sigma`` (a multiplicative, per-GPU effect) and
``reliability.host_noise_s`` (an additive, per-node effect), by least squares on the
growth in percentage points (``reliability.jitter_sigma_fp8`` separately for the FP8
groups: FP8 GEMMs run at the power limit, where power management varies clocks most from
GPU to GPU; Sinha et al. SC'22, "Not All GPUs Are Created Equal", measure several per cent
of GPU-to-GPU variation in compute-bound kernels under power management): a grid over
sigma (each point one engine replay per case) and, for each sigma, a fine grid over the
host noise, which enters in closed form. Slow nodes stay at the topology's value (0 for
these health-checked benchmark clusters).

Cross-validation is leave-one-group-out: each group's growth is predicted with constants
fitted on the other groups only. Run::

    PYTHONPATH=$PWD python -m simulator.reliability.scale_fit            # fit + LOGO table
    PYTHONPATH=$PWD python -m simulator.reliability.scale_fit --sigmas 0:0.05:11
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from ..api import resolve
from ..hardware import Topology
from ..validation.cases import Case, load_cases
from ..workload.plan import build_plan
from .variability import Variability, expected_step, harmonic

SCALE_KEYS = {"parallelism.data", "training.global_batch_size"}
SIGMAS = np.linspace(0.0, 0.05, 11)
HOST_NOISE_S = np.linspace(0.0, 0.2, 401)


@dataclass
class Endpoint:
    """One end (smallest or largest scale) of a group, ready to replay."""

    case: Case
    inp: object  # EngineInput
    var: Variability

    def replay(self, sigma: float) -> float:
        """Expected step without the host term, s."""
        return expected_step(self.inp, replace(self.var, sigma=sigma, host_noise_s=0.0))

    @property
    def harmonic(self) -> float:
        return harmonic(self.var.job_nodes)


@dataclass
class Group:
    name: str
    small: Endpoint
    large: Endpoint

    @property
    def measured_growth(self) -> float:
        return self.large.case.measured / self.small.case.measured - 1.0


def _endpoint(case: Case) -> Endpoint:
    w, t = resolve(case.spec["workload"], case.topology, case.spec["overrides"],
                   case.topology_overrides)
    plan = build_plan(w, Topology.from_config(t))
    return Endpoint(case=case, inp=plan.engine_input, var=Variability.of(w, t))


def _fixed_work(cases: list[Case]) -> bool:
    """Same model and plan, only DP and global batch changing, in proportion."""
    if len(cases) < 2 or any(set(c.spec["overrides"]) - SCALE_KEYS for c in cases):
        return False
    base = cases[0].spec["workload"]
    ratios = {c.spec["overrides"].get("training.global_batch_size",
                                      base["training"]["global_batch_size"])
              / c.spec["overrides"].get("parallelism.data", base["parallelism"]["data"])
              for c in cases}
    return len(ratios) == 1


def scale_groups(directory: str | None = None) -> list[Group]:
    """Every scale group of the dense step-time cases, endpoints built."""
    by_group: dict[str, list[Case]] = defaultdict(list)
    for c in load_cases(directory):
        if c.category == "dense_step_time":
            by_group[c.group].append(c)
    groups = []
    for name, cases in by_group.items():
        if not _fixed_work(cases):
            continue
        ends = [_endpoint(c) for c in (cases[0], cases[-1])]
        ends.sort(key=lambda e: e.var.peers * e.inp.fwd.shape[0])
        groups.append(Group(name, ends[0], ends[1]))
    return groups


def growth_table(groups: list[Group], sigmas: np.ndarray) -> np.ndarray:
    """Replays: ``[group, sigma, end]`` expected step without host noise (s)."""
    return np.array([[[g.small.replay(s), g.large.replay(s)] for s in sigmas] for g in groups])


def predicted(table: np.ndarray, groups: list[Group], mu: np.ndarray) -> np.ndarray:
    """Growth ``[group, sigma, mu]`` for every sigma of the table and host noise ``mu``."""
    hs = np.array([g.small.harmonic for g in groups])[:, None, None]
    hl = np.array([g.large.harmonic for g in groups])[:, None, None]
    return (table[:, :, 1:2] + mu * hl) / (table[:, :, 0:1] + mu * hs) - 1.0


def best(err2: np.ndarray, mask: np.ndarray, fp8: np.ndarray) -> tuple[int, int, int]:
    """(bf16 sigma index, fp8 sigma index, mu index) minimising the squared growth error
    over the ``mask`` groups; each group uses the sigma of its own precision."""
    sse = (err2[mask & ~fp8].sum(axis=0)[:, None, :]
           + err2[mask & fp8].sum(axis=0)[None, :, :])
    i, f, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
    return int(i), int(f), int(j)


@dataclass(frozen=True)
class FitResult:
    sigma: float
    sigma_fp8: float
    host_noise_s: float
    rows: list[dict]  # per group: measured, fitted-on-all and held-out predictions (pp)


def fit(groups: list[Group], sigmas: np.ndarray = SIGMAS, mus: np.ndarray = HOST_NOISE_S
        ) -> FitResult:
    """Fit on all groups, and leave-one-group-out predictions for each."""
    table = growth_table(groups, sigmas)
    pred = predicted(table, groups, mus)
    meas = np.array([g.measured_growth for g in groups])
    err2 = (pred - meas[:, None, None]) ** 2
    everyone = np.ones(len(groups), bool)
    fp8 = np.array([g.small.var.fp8 for g in groups])
    i, f, j = best(err2, everyone, fp8)
    rows = []
    for k, g in enumerate(groups):
        ib, ifp, jk = best(err2, everyone & (np.arange(len(groups)) != k), fp8)
        ik = ifp if fp8[k] else ib
        own = f if fp8[k] else i
        rows.append({"group": g.name, "gpus": (g.small.var.peers * g.small.inp.fwd.shape[0],
                                                 g.large.var.peers * g.large.inp.fwd.shape[0]),
                     "measured_pp": 100 * meas[k], "model_alone_pp": 100 * pred[k, 0, 0],
                     "fitted_pp": 100 * pred[k, own, j], "held_out_pp": 100 * pred[k, ik, jk],
                     "held_out_sigma": float(sigmas[ik]),
                     "held_out_host_noise_s": float(mus[jk])})
    return FitResult(float(sigmas[i]), float(sigmas[f]), float(mus[j]), rows)


def render(res: FitResult) -> str:
    lines = [f"fitted on all groups: jitter_sigma = {res.sigma:.4f}, "
             f"jitter_sigma_fp8 = {res.sigma_fp8:.4f}, host_noise_s = {res.host_noise_s:.4f}",
             "| group | GPUs | measured | one-step model | fitted | held out (LOGO) | "
             "LOGO error |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in res.rows:
        lines.append(f"| {r['group']} | {r['gpus'][0]} -> {r['gpus'][1]} | "
                     f"{r['measured_pp']:+.1f} % | {r['model_alone_pp']:+.1f} % | "
                     f"{r['fitted_pp']:+.1f} % | {r['held_out_pp']:+.1f} % | "
                     f"{r['held_out_pp'] - r['measured_pp']:+.1f} pp |")
    return "\n".join(lines)


def _grid(text: str) -> np.ndarray:
    lo, hi, n = text.split(":")
    return np.linspace(float(lo), float(hi), int(n))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sigmas", default="0:0.05:11", help="sigma grid lo:hi:n")
    ap.add_argument("--host-noise", default="0:0.2:401", help="host noise grid lo:hi:n (s)")
    args = ap.parse_args(argv)
    print(render(fit(scale_groups(), _grid(args.sigmas), _grid(args.host_noise))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
