"""Scale growth of weakly scaled dense jobs: the variability model against measurement.

Each group of validation/dense_step_time*.yaml that runs one model and plan at several GPU
counts with fixed work per GPU is a *scale group*; its measured step grows by +1 to +10 %
from the smallest to the largest scale. Constants are fitted leave-one-group-out
(simulator.reliability.scale_fit) and each group's held-out growth must be within 2
percentage points, except the groups listed in OUTSIDE with the reason.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.config import load_topology
from simulator.reliability.scale_fit import fit, scale_groups
from simulator.reliability.variability import expected_step

TOLERANCE_PP = 2.0
# Groups no shared constant reproduces within 2 pp held out. Two FP8 series are not
# smooth in scale, unlike their BF16 twins on the same nodes and release (whose points
# lie within 0.4 pp of a log-linear trend): GPT-3 175B FP8 grows +13.5 % at 1,024 GPUs
# and then +5.4 % at 2,048; Llama 3.1 405B FP8 grows +0.6 % from 576 to 1,152 GPUs and
# then +9.2 % to 2,304. Nemotron-4 340B grows about twice what the fit gives in both
# precisions (BF16 +5.0 %, FP8 +10.4 %) on the shortest step of the H100 groups.
OUTSIDE = {"dgxc-gpt3-175b-h100-fp8", "dgxc-llama31-405b-h100-fp8",
           "dgxc-nemotron4-340b-h100", "dgxc-nemotron4-340b-h100-fp8"}
# A coarse sigma grid around the shipped constant (the command uses a finer one).
SIGMAS = np.array([0.0, 0.015, 0.02, 0.025])


@pytest.fixture(scope="module")
def groups():
    return scale_groups()


@pytest.fixture(scope="module")
def result(groups):
    return fit(groups, SIGMAS)


def test_there_are_sixteen_scale_groups(result):
    assert len(result.rows) == 16
    # the amax barrier applies to exactly the FP8 groups (all run delayed scaling)
    assert {r["group"] for r in result.rows if r["barrier"]} == \
        {r["group"] for r in result.rows if "fp8" in r["group"]}


def test_shipped_constants_are_the_fit(result):
    r = load_topology("dgx-h100").reliability
    assert r.jitter_sigma == result.sigma
    assert r.host_noise_s == pytest.approx(result.host_noise_s, abs=1e-12)
    assert r.sync_noise_s == pytest.approx(result.sync_noise_s, abs=1e-12)
    assert load_topology("gb200-nvl72").reliability.sync_noise_s == r.sync_noise_s


def test_held_out_growth_within_two_points(result):
    outside = {r["group"] for r in result.rows
               if abs(r["held_out_pp"] - r["measured_pp"]) > TOLERANCE_PP}
    assert outside <= OUTSIDE, sorted(outside - OUTSIDE)
    inside = [r for r in result.rows if r["group"] not in OUTSIDE]
    assert len(inside) >= 12
    # the variability moves every group toward its measurement on average
    before = np.mean([abs(r["model_alone_pp"] - r["measured_pp"]) for r in result.rows])
    after = np.mean([abs(r["held_out_pp"] - r["measured_pp"]) for r in result.rows])
    assert after < before


def test_the_fit_is_exact_for_the_shipped_constants(groups, result):
    # The fit puts the barrier term in through the critical path's slope; a full replay
    # with the constants added to the phases must give the same growth.
    for g, row in zip(groups, result.rows, strict=True):
        def step(end):
            v = replace(end.var, sigma=result.sigma, host_noise_s=result.host_noise_s,
                        sync_noise_s=result.sync_noise_s)
            return expected_step(end.inp, v)
        growth = 100 * (step(g.large) / step(g.small) - 1)
        assert growth == pytest.approx(row["fitted_pp"], abs=0.02), g.name
