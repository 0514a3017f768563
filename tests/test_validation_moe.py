"""MoE training step times against published Megatron-Bridge H100 measurements.

Cases: ``validation/moe_step_time.yaml`` (category ``moe_step_time``). Bars (absolute relative
error, predicted / measured - 1), set from the errors the model had when the cases were added
(median 24 %, max 27 % without the two Qwen3-30B-A3B rows), rounded up to the next 5 % with
some margin: median <= 30 %, every non-xfail case <= 30 %. These bars are to be tightened as
the MoE model improves, never loosened.

The two Qwen3-30B-A3B rows are predicted 64.5 % too fast (18.2 s vs 51.3 s; 8.8 s vs 24.8 s):
xfail(strict=True) until the simulator models small-expert grouped-GEMM efficiency and the
token permutation / dispatcher cost (validation/analysis.md, "MoE step times").
"""

from __future__ import annotations

import statistics

import pytest

from simulator.validation import load_cases, run_cases

MOE_MEDIAN, MOE_MAX = 0.30, 0.30
FAR_OFF = {"moe-mbridge2602-qwen3-30b-h100-16g-fp8": "measured 51.27 s, predicted 18.2 s (-64.5 %)",
           "moe-mbridge2511-qwen3-30b-h100-16g-fp8": "measured 24.85 s, predicted 8.8 s (-64.5 %)"}
CASES = load_cases(categories=["moe_step_time"])


@pytest.fixture(scope="module")
def rows():
    return run_cases(CASES)


def test_moe_cases_are_loaded_with_sources():
    assert len(CASES) >= 6 and all(c.id.startswith("moe-") and c.source for c in CASES)
    assert set(FAR_OFF) <= {c.id for c in CASES}


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
