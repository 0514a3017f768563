"""MoE training step times and EP all-to-all bandwidths against published measurements.

Step times: ``validation/moe_step_time.yaml`` (category ``moe_step_time``): Megatron-Bridge
performance summaries (H100, GB200, GB300), NeMo AutoModel (H100) and the NeMo Framework
25.04 summary (GB200), each with its plan, dispatcher and recipe source. Bars (absolute
relative error, predicted / measured - 1): median <= 10 %, every case not listed below
<= 20 % (issue 12). The one MoE-specific constant, ``gpu.host_launch_us``, is fitted on the
training (non-held-out) H100 cases only (``topologies/dgx-h100.yaml`` sources); the GB200 /
GB300 cases are never fitted on.

Strict xfails (``KNOWN_MISSES``), each a model error the case exposes, not a constant to
fit: the Megatron-Bridge 25.11 Qwen3-30B H100 row on its table's plan (``ROW_PLAN_MISSES``:
too fast and over 80 GB, ``validation/analysis.md`` "MoE rows the model misses").

EP all-to-all: ``validation/collective_busbw.yaml`` category ``ep_alltoall`` (DeepEP README
tables in DeepEP's own metric, NCCL all-to-all busbw): max <= 15 %.
"""

from __future__ import annotations

import statistics

import pytest

from simulator.validation import load_cases, run_cases

MOE_MEDIAN, MOE_MAX, EP_MAX = 0.10, 0.20, 0.15
CASES = load_cases(categories=["moe_step_time"])
# The Megatron-Bridge 25.11 H100 rows on their table's plan (validation/moe_step_time.yaml
# notes; validation/analysis.md "MoE rows the model misses"). Qwen3: per sample the MBS 2 run
# is as slow as the 26.02 MBS 1 run, while the model's MBS 1 step is mostly per-launch host
# time, which MBS 2 halves per sample (the two releases' recipes may differ: a lead, not a
# proof); predicted over 80 GB. (The GPT-OSS MBS 4 row, -20.2 % before the experts' eager
# clamp / bias kernels were costed, is -12.6 % since: simulator/workload/moe/eager.py.)
ROW_PLAN_MISSES = {
    "moe-mbridge2511-qwen3-30b-h100-16g-fp8":
        "table row MBS 2 / VP 24: 14.75 s predicted against 24.85 s (-40.6 %), and 89 GB on "
        "an 80 GB GPU; per sample the run is as slow as the 26.02 MBS 1 row, which a per-launch "
        "host cost cannot give",
}
# The GPT-OSS GB300 MXFP8 runs (-21.5 / -21.9 % until 2026-12) are within the bar since
# their recipe's FP8 attention is costed (simulator/compute/fp8_attention.py: its sliding-
# window backward runs the whole causal triangle): -17.2 / -17.5 %.
KNOWN_MISSES = dict(ROW_PLAN_MISSES)
# The 25.11 GPT-OSS H100 row on its table's plan (MBS 4) does not fit in 80 GB
# (tests/test_memory_fits.py): a sign that the release's MBS 1 preset ran, whatever its
# step-time error. The Qwen3-30B row's plan (MBS 2, VP 24) fits (76 GB) since the combine of
# Megatron-Core 0.13+ keeps no expert outputs (stacks/megatron.yaml moe.probs_in_activation).
ROW_PLAN_OVER_MEMORY = ("moe-mbridge2511-gpt-oss-120b-h100-64g-bf16",)
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


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[c.id]))
    if c.id in KNOWN_MISSES else c for c in CASES], ids=[c.id for c in CASES])
def test_moe_case_within_max(case, rows):
    (row,) = [r for r in rows if r.case.id == case.id]  # the module's one run of each case
    assert abs(row.error) <= MOE_MAX, (
        f"measured {case.measured:.2f} s, predicted {row.predicted:.2f} s ({row.error:+.1%})")


@pytest.mark.parametrize("case", EP_CASES, ids=[c.id for c in EP_CASES])
def test_ep_alltoall_within_max(case):
    (row,) = run_cases([case])
    assert abs(row.error) <= EP_MAX, (
        f"measured {case.measured:.1f} GB/s, predicted {row.predicted:.1f} ({row.error:+.1%})")
