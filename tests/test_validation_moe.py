"""MoE training step times and EP all-to-all bandwidths against published measurements.

Step times: ``validation/moe_step_time.yaml`` (category ``moe_step_time``): Megatron-Bridge
performance summaries (H100, GB200), NeMo AutoModel (H100) and the NeMo Framework 25.04
summary (GB200), each with its plan, dispatcher and recipe source. Bars (absolute relative
error, predicted / measured - 1): median <= 10 %, every non-xfail case <= 20 % (issue 12).
The one MoE-specific constant, ``gpu.host_launch_us``, is fitted on the training
(non-held-out) H100 cases only (``topologies/dgx-h100.yaml`` sources).

No case is xfail: the two Megatron-Bridge 25.11 rows run with the micro-batch their presets
used (issue 13's recipe audit), which made the per-launch host model consistent with both
releases.

EP all-to-all: ``validation/collective_busbw.yaml`` category ``ep_alltoall`` (DeepEP README
tables in DeepEP's own metric, NCCL all-to-all busbw): max <= 15 %.
"""

from __future__ import annotations

import statistics

import pytest

from simulator.validation import load_cases, run_cases

MOE_MEDIAN, MOE_MAX, EP_MAX = 0.10, 0.20, 0.15
CASES = load_cases(categories=["moe_step_time"])
EP_CASES = load_cases(categories=["ep_alltoall"])
PUBLISHERS = ("NVIDIA-NeMo/Megatron-Bridge", "NVIDIA-NeMo/Automodel", "NVIDIA NeMo Framework")


@pytest.fixture(scope="module")
def rows():
    return run_cases(CASES)


def test_moe_cases_have_sources_plans_and_dispatchers():
    assert len(CASES) >= 12
    publishers = {p for c in CASES for p in PUBLISHERS if c.source.startswith(p)}
    assert len(publishers) >= 3, publishers
    for c in CASES:
        wl = c.spec["workload"]
        assert c.source and wl["parallelism"] and wl["model"]["moe"]["token_dispatcher_type"]


def test_moe_median_error(rows):
    med = statistics.median(abs(r.error) for r in rows)
    assert med <= MOE_MEDIAN, f"median |error| {med:.1%}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_moe_case_within_max(case, rows):
    (row,) = [r for r in rows if r.case.id == case.id]  # the module's one run of each case
    assert abs(row.error) <= MOE_MAX, (
        f"measured {case.measured:.2f} s, predicted {row.predicted:.2f} s ({row.error:+.1%})")


@pytest.mark.parametrize("case", EP_CASES, ids=[c.id for c in EP_CASES])
def test_ep_alltoall_within_max(case):
    (row,) = run_cases([case])
    assert abs(row.error) <= EP_MAX, (
        f"measured {case.measured:.1f} GB/s, predicted {row.predicted:.1f} ({row.error:+.1%})")
