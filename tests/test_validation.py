"""Accuracy against published measurements: these tests fail when accuracy slips.

Cases are read from the repository's ``validation/`` folder (sources and assumptions in
``validation/README.md``); ``clustersim validate`` writes the same numbers to
``reports/validation.md``. Bars (absolute relative error, predicted / measured - 1):

* dense training step times: median <= 5 % over all cases and again over the FP8 cases alone
  (so a good bf16 fit cannot hide a bad FP8 one); no case worse than 15 % among those no
  constant was fitted on: the held-out third (32 cases) and every never-fitted run of
  ``validation/scaling/`` and ``validation/megatron_bridge/`` (133 runs). Until 2026-12-02 the
  max bar was 20 %, scored over all cases, fitted ones included (worst 9.2 %);
* NCCL bus bandwidth: every measured point within 10 %;
* the 22B layer of Korthikanti et al. 2022 (forward and backward, every experiment): 10 %.

The bars were 10 % / 25 % / 15 % / 15 % until the refit after the backward-TP-overlap and
overlap-slowdown changes, when the model reached 2.4 % / 13.5 % / 2.9 % / 4.8 %; each was
tightened to keep at least ~1.5x margin (reports/validation.md).

Do not loosen a bar to make it pass: if the model cannot reach one, mark that assertion
``xfail(strict=True, reason=<measured numbers>)`` and name the missing physics; a single run
held by such an xfail is listed in ``tests/known_gaps.py`` and left to it.
The dense cases are 100 full simulations (16 A100, 50 H100, 18 GB200, 16 GB300; 50 of them
fp8); the four pipelines with 280-1120 micro-batches on 35-64 stages take most of the ~20 s
this module needs (one core).
"""

from __future__ import annotations

import statistics

import pytest
from known_gaps import KNOWN_GAPS

from simulator.validation import load_cases, run_cases
from simulator.validation.cases import DEFAULT_DIR, precision
from simulator.validation.intervals import external_dirs

STEP_MEDIAN, STEP_MAX, BUSBW_MAX, LAYER_MAX = 0.05, 0.15, 0.10, 0.10


def _ids(cases):
    return [c.id for c in cases]


BUSBW = load_cases(categories=["collective_busbw"])
LAYER = load_cases(categories=["layer_time"])


@pytest.fixture(scope="module")
def dense_rows():
    return run_cases(load_cases(categories=["dense_step_time"]))


def test_cases_come_from_the_repository():
    assert DEFAULT_DIR.name == "validation" and (DEFAULT_DIR / "README.md").is_file()
    assert len(BUSBW) >= 20 and len(LAYER) == 10


def test_dense_step_time_median_error(dense_rows):
    assert len(dense_rows) >= 30
    errs = sorted(abs(r.error) for r in dense_rows)
    assert statistics.median(errs) <= STEP_MEDIAN, f"median |error| {statistics.median(errs):.1%}"


@pytest.fixture(scope="module")
def never_fitted_rows():
    """Dense runs of the Megatron-family sets under validation/ no constant is fitted on
    (about 3 s); validation/stacks (other stacks) has its own bars in test_validation_stacks,
    validation/sdpa_backends (one GPU, two attention kernels) in test_sdpa_backends."""
    return run_cases([c for d in external_dirs() if d.name not in ("stacks", "sdpa_backends")
                      for c in load_cases(d, ["dense_step_time"])])


def test_dense_max_error_over_the_cases_no_constant_was_fitted_on(dense_rows,
                                                                   never_fitted_rows):
    held = [r for r in dense_rows if r.case.holdout]
    assert len(held) >= len(dense_rows) // 4 and len(never_fitted_rows) >= 130
    worst = [f"{r.case.id}: measured {r.case.measured:.3f} s, predicted {r.predicted:.3f} s "
             f"({r.error:+.1%})" for r in held + never_fitted_rows
             if abs(r.error) > STEP_MAX and r.case.id not in KNOWN_GAPS]
    assert not worst, "; ".join(worst)


def test_fp8_step_times_meet_the_dense_bars(dense_rows):
    fp8 = [r for r in dense_rows if precision(r.case) == "fp8"]
    assert len(fp8) >= 25 and any(r.case.holdout for r in fp8)
    median = statistics.median(abs(r.error) for r in fp8)
    assert median <= STEP_MEDIAN, f"fp8 median |error| {median:.1%}"
    worst = [f"{r.case.id}: {r.error:+.1%}" for r in fp8 if r.case.holdout
             and abs(r.error) > STEP_MAX]
    assert not worst, "; ".join(worst)


@pytest.mark.parametrize("case", BUSBW, ids=_ids(BUSBW))
def test_nccl_busbw_point_within_tolerance(case):
    (row,) = run_cases([case])
    assert abs(row.error) <= BUSBW_MAX, (
        f"predicted {row.predicted:.1f} GB/s vs measured {case.measured} GB/s")


@pytest.mark.parametrize("case", LAYER, ids=_ids(LAYER))
def test_22b_layer_time_within_tolerance(case):
    (row,) = run_cases([case])
    assert abs(row.error) <= LAYER_MAX, (
        f"predicted {row.predicted * 1e3:.2f} ms vs measured {case.measured * 1e3:.2f} ms")
