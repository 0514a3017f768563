"""One GPU, two SDPA backends (validation/sdpa_backends/, simulator/studies/sdpa_backends.py):
the step-time ratio FlashAttention-2 / cuDNN tests the attention model alone."""

from __future__ import annotations

import pytest

from simulator.api import resolve
from simulator.hardware import Topology
from simulator.memory import estimate_memory
from simulator.studies.sdpa_backends import FOLDER, report, rows
from simulator.validation.cases import load_cases


@pytest.fixture(scope="module")
def data():
    return rows()


def test_each_run_states_its_recipe_and_fits():
    cases = load_cases(FOLDER)
    assert len(cases) == 24
    for c in cases:
        assert c.recipe["source"] and isinstance(c.recipe["unknown"], list), c.id
        w, t = resolve(c.spec["workload"], c.topology, c.spec["overrides"])
        assert estimate_memory(w, Topology.from_config(t)).fits, c.id


def test_hopper_backend_ratio_within_5_percent_at_every_length(data):
    # cuDNN (0.64 of peak saturated, cuDNN 9.19 benchmark) against FA2 (0.35), both at
    # Hopper's tile fill and head dim 64: the measured 1.02x-1.18x lead from 768 to 16K
    # tokens is predicted within +0.4 .. +3.9 %
    h200 = [r for r in data if r["gpu"] == "h200"]
    assert len(h200) == 6
    assert all(abs(r["ratio_error"]) <= 0.05 for r in h200), h200
    ratios = [r["measured_ratio"] for r in h200]
    assert ratios == sorted(ratios)  # attention's share grows with the sequence


@pytest.mark.xfail(strict=True, reason=(
    "B200, cuDNN 9.9.0 (NGC PyTorch 25.04), head dim 64: cuDNN leads FlashAttention-2 by "
    "1.04x-1.31x per step from 768 to 16K tokens, the model by 1.13x-1.61x. With FA2 at its "
    "modelled rate the steps imply cuDNN attention at 0.13 / 0.17 / 0.21 of the bf16 peak at "
    "4K / 8K / 16K against the model's 0.29 / 0.35 / 0.40 (the cuDNN 9.10-9.13 benchmark at "
    "head dim 128 with Hopper's head-dim factor); the NeMo 25.04 B200 long-sequence rows "
    "(cuDNN 9.7) are too fast the same way. No benchmark of those releases or of head dim "
    "64 on Blackwell is published (validation/analysis.md)"))
def test_blackwell_backend_ratio_within_5_percent(data):
    b200 = [r for r in data if r["gpu"] == "dgx-b200"]
    assert len(b200) == 6
    assert all(abs(r["ratio_error"]) <= 0.05 for r in b200), b200


def test_report_lists_both_gpus(data):
    text = report(data)
    assert "| h200 | 16384 |" in text and "| dgx-b200 | 768 |" in text
