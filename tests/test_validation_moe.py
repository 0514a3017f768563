"""MoE training step times and EP all-to-all bandwidths against published measurements.

Step times: ``validation/moe_step_time.yaml`` (category ``moe_step_time``): Megatron-Bridge
performance summaries (H100, GB200), NeMo AutoModel (H100) and the NeMo Framework 25.04
summary (GB200), each with its plan, dispatcher and recipe source. Bars (absolute relative
error, predicted / measured - 1): median <= 10 %, every non-xfail case <= 20 % (issue 12).
The one MoE-specific constant, ``gpu.host_launch_us``, is fitted on the training
(non-held-out) H100 cases only (``topologies/dgx-h100.yaml`` sources).

Strict xfails: three eager Megatron-Bridge rows whose published throughput per token does
not change with the micro-batch size (Qwen3-30B-A3B MBS 1 vs MBS 2: 5113 vs 5275
tok/s/GPU; GPT-OSS-120B MBS 4 vs MBS 1), which a per-launch host cost cannot reproduce in
both directions (validation/analysis.md, "MoE step times").

EP all-to-all: ``validation/collective_busbw.yaml`` category ``ep_alltoall`` (DeepEP README
tables in DeepEP's own metric, NCCL all-to-all busbw): max <= 15 %.
"""

from __future__ import annotations

import statistics

import pytest

from simulator.validation import load_cases, run_cases

MOE_MEDIAN, MOE_MAX, EP_MAX = 0.10, 0.20, 0.15
FAR_OFF = {
    "moe-mbridge2602-qwen3-30b-h100-16g-fp8":
        "measured 51.27 s, predicted 68.2 s (+33 %): host launch-bound at MBS 1",
    "moe-mbridge2511-qwen3-30b-h100-16g-fp8":
        "measured 24.85 s, predicted 17.7 s (-29 %): same tok/s as MBS 1, host cost amortised",
    "moe-mbridge2511-gpt-oss-120b-h100-64g-bf16":
        "measured 5.82 s, predicted 4.56 s (-22 %): MBS 4 no faster per token than MBS 1",
}
CASES = load_cases(categories=["moe_step_time"])
EP_CASES = load_cases(categories=["ep_alltoall"])
PUBLISHERS = ("NVIDIA-NeMo/Megatron-Bridge", "NVIDIA-NeMo/Automodel", "NVIDIA NeMo Framework")


@pytest.fixture(scope="module")
def rows():
    return run_cases(CASES)


def test_moe_cases_have_sources_plans_and_dispatchers():
    assert len(CASES) >= 12 and set(FAR_OFF) <= {c.id for c in CASES}
    publishers = {p for c in CASES for p in PUBLISHERS if c.source.startswith(p)}
    assert len(publishers) >= 3, publishers
    for c in CASES:
        wl = c.spec["workload"]
        assert c.source and wl["parallelism"] and wl["model"]["moe"]["token_dispatcher_type"]


def test_moe_median_error(rows):
    med = statistics.median(abs(r.error) for r in rows)
    assert med <= MOE_MEDIAN, f"median |error| {med:.1%}"


def _params():
    return [pytest.param(c, id=c.id, marks=pytest.mark.xfail(strict=True, reason=FAR_OFF[c.id]))
            if c.id in FAR_OFF else pytest.param(c, id=c.id) for c in CASES]


@pytest.mark.parametrize("case", _params())
def test_moe_case_within_max(case):
    (row,) = run_cases([case])
    assert abs(row.error) <= MOE_MAX, (
        f"measured {case.measured:.2f} s, predicted {row.predicted:.2f} s ({row.error:+.1%})")


@pytest.mark.parametrize("case", EP_CASES, ids=[c.id for c in EP_CASES])
def test_ep_alltoall_within_max(case):
    (row,) = run_cases([case])
    assert abs(row.error) <= EP_MAX, (
        f"measured {case.measured:.1f} GB/s, predicted {row.predicted:.1f} ({row.error:+.1%})")
