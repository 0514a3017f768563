"""The step-to-step spread of the Monte-Carlo, against published runs.

``step_time_p50_s`` / ``step_time_p99_s`` come from seeded replays of the step with drawn
variability (:func:`simulator.metrics.variability.sample_steps`). Its three constants
were fitted on how the *mean* step grows with scale (:mod:`.scale_fit`), so the spread of
single steps around that mean is a prediction, not a fit. dgxc-benchmarking publishes, for
a few real jobs, the mean and the standard deviation of the step time over iterations 11-44
of one run (``validation/step_spread/dgxc_examples.yaml``); this module simulates the same
model, plan and GPUs and compares the standard deviations (seconds, and relative to the
mean). A sample standard deviation of ``n`` normal steps has a relative standard error of
about ``1 / sqrt(2 (n - 1))``: 12 % for the published 34 steps.

Run::

    PYTHONPATH=$PWD python -m simulator.validation.step_spread
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..api import resolve
from ..hardware import Topology
from ..metrics.variability import Variability, sample_steps
from ..workload.plan import build_plan
from .cases import DEFAULT_DIR, load_cases

RUNS = DEFAULT_DIR / "step_spread" / "dgxc_examples.yaml"
STEPS = 200  # Monte-Carlo steps per run (the relative standard error of the sd: 5 %)


@dataclass(frozen=True)
class Spread:
    """One published run and the model's spread for it (s)."""

    id: str
    case: str
    measured_mean_s: float
    measured_sd_s: float
    model_mean_s: float
    model_sd_s: float

    @property
    def measured_rel(self) -> float:
        return self.measured_sd_s / self.measured_mean_s

    @property
    def model_rel(self) -> float:
        return self.model_sd_s / self.model_mean_s

    @property
    def ratio(self) -> float:
        """Model over measured, of the relative standard deviations."""
        return self.model_rel / self.measured_rel


def spreads(path: Path = RUNS, seed: int = 0, steps: int = STEPS) -> list[Spread]:
    """Simulate every run of ``path`` (``steps`` seeded Monte-Carlo steps each)."""
    runs = yaml.safe_load(path.read_text())["runs"]
    cases = {c.id: c for c in load_cases()}
    out = []
    for r in runs:
        c = cases[r["case"]]
        w, t = resolve(c.spec["workload"], c.topology, c.spec["overrides"],
                       c.topology_overrides)
        inp = build_plan(w, Topology.from_config(t)).engine_input
        draws = sample_steps(inp, Variability.of(w, t), seed, steps)
        out.append(Spread(r["id"], r["case"], float(r["mean_s"]), float(r["std_s"]),
                          float(draws.mean()), float(draws.std(ddof=1))))
    return out


def render(rows: list[Spread]) -> str:
    lines = ["| published run | simulated as | mean, measured / model (s) | sd, measured | "
             "sd, model | model / measured |", "|---|---|---|---:|---:|---:|"]
    for s in rows:
        lines.append(f"| {s.id} | {s.case} | {s.measured_mean_s:.3f} / {s.model_mean_s:.3f} | "
                     f"{s.measured_sd_s * 1e3:.0f} ms ({100 * s.measured_rel:.3f} %) | "
                     f"{s.model_sd_s * 1e3:.0f} ms ({100 * s.model_rel:.3f} %) | "
                     f"{s.ratio:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)
    print(render(spreads()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
