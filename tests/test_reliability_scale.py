"""Scale growth of weakly scaled dense jobs: the variability model against measurement.

Each group of validation/dense_step_time*.yaml that runs one model and plan at several GPU
counts with fixed work per GPU is a *scale group*; its measured step grows by +1 to +10 %
from the smallest to the largest scale. Constants are fitted leave-one-group-out
(simulator.reliability.scale_fit) and each group's held-out growth must be within 2
percentage points, except the groups listed in OUTSIDE with the reason.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config import load_topology
from simulator.reliability.scale_fit import fit, scale_groups

TOLERANCE_PP = 2.0
# Groups whose measured growth no shared constant reproduces within 2 pp held out. The FP8
# growths scatter from +1.6 % (Llama 3.1 8B) to +10.4 % (Nemotron-4 340B) at similar
# scales, and Llama 3.1 405B grows +2.4 % in BF16 but +9.9 % in FP8 on the same nodes;
# the missing physics is an FP8-specific per-step cost that grows with scale
# (validation/analysis.md, item 2), not a jitter.
OUTSIDE = {"dgxc-nemotron4-340b-h100", "dgxc-nemotron4-15b-h100-fp8",
           "dgxc-nemotron4-340b-h100-fp8", "dgxc-llama31-8b-h100-fp8",
           "dgxc-llama31-70b-h100-fp8", "dgxc-llama31-405b-h100-fp8"}


@pytest.fixture(scope="module")
def result():
    groups = scale_groups()
    # a coarse grid that contains the shipped constants (the command uses a finer one)
    return fit(groups, np.linspace(0.0, 0.05, 6), np.linspace(0.0, 0.2, 401))


def test_there_are_sixteen_scale_groups(result):
    assert len(result.rows) == 16


def test_shipped_constants_are_the_fit(result):
    r = load_topology("dgx-h100").reliability
    assert (r.jitter_sigma, r.jitter_sigma_fp8) == (result.sigma, result.sigma_fp8)
    assert r.host_noise_s == pytest.approx(result.host_noise_s, abs=1e-12)


def test_held_out_growth_within_two_points(result):
    outside = {r["group"] for r in result.rows
               if abs(r["held_out_pp"] - r["measured_pp"]) > TOLERANCE_PP}
    assert outside <= OUTSIDE, sorted(outside - OUTSIDE)
    inside = [r for r in result.rows if r["group"] not in OUTSIDE]
    assert len(inside) >= 10
    # the variability moves every group toward its measurement on average
    before = np.mean([abs(r["model_alone_pp"] - r["measured_pp"]) for r in result.rows])
    after = np.mean([abs(r["held_out_pp"] - r["measured_pp"]) for r in result.rows])
    assert after < before
