"""Cross-validated accuracy: the committed residual file, its bars, a small fixed slice
of the cross-validation rerun here, and one GPU's whole cross-validation rerun and compared
with the committed file (so the bars below are the current model's; the full run,
``python -m simulator.validation.crossval``, takes minutes and regenerates
``simulator/metrics/cv_residuals.json``).

Bars on the leave-one-group-out error of the dense step times (the accuracy the README
quotes): median <= 5 %, max <= 15 % (:data:`simulator.validation.cv_report.CV_BARS`). The
worst case, Llama 3.1 405B FP8 on 576 GPUs, was +15.1 % until issue 18 charged Transformer
Engine's FP8 cast / transpose kernels (simulator/workload/fp8.py): +14.3 % since.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from simulator.validation import load_cases, predict
from simulator.validation.crossval import (
    FITTED_ELSEWHERE,
    RECIPES,
    crossvalidate,
    fit_box,
    fold_key,
    shipped,
    source_key,
)
from simulator.validation.cv_report import CV_BARS, check_cv_bars, load, select, stats
from simulator.validation.fit import FIT_CATEGORIES
from simulator.validation.surrogate import build_surface

CASES = load_cases()
DOC = load()
BY_ID = {c.id: c for c in CASES}
# The slice rerun below: five cheap H100 BF16 cases (10 ms per simulation), two groups.
SLICE = ("dgxc-nemotron4-15b-h100-16g", "dgxc-nemotron4-15b-h100-256g",
         "dgxc-nemotron4-15b-h100-2048g", "dgxc-llama31-8b-h100-8g", "dgxc-llama31-8b-h100-16g")


def test_fold_and_source_keys():
    assert fold_key(BY_ID["dgxc-llama31-8b-h100-fp8-16g"]) == "dgxc-llama31-8b-h100"
    assert fold_key(BY_ID["dgxc-nemotron4-340b-gb200-fp8-strong-128g"]) == \
        "dgxc-nemotron4-340b-gb200-strong"
    assert source_key(BY_ID["dgxc-gpt3-175b-h100-128g"]) == "dgxc-24.11"
    assert source_key(BY_ID["dgxc-llama31-8b-h100-fp8-16g"]) == "dgxc-24.09"
    assert source_key(BY_ID["narayanan2021-t1-1.7b"]) == "narayanan2021"


def test_every_fitted_case_is_cross_validated_and_no_residual_is_stale():
    fitted = {c.id for c in CASES if c.category in FIT_CATEGORIES and c.topology in RECIPES}
    assert {r["id"] for r in select(DOC, "logo")} == fitted
    assert {r["id"] for r in select(DOC, "loso")} == fitted
    assert all(r["id"] in BY_ID for r in DOC["residuals"])


@pytest.mark.parametrize("cid", ["dgxc-llama31-8b-h100-16g", "dgxc-nemotron4-15b-h100-fp8-256g",
                                 "korthikanti2022-t4-sp-bwd"])
def test_committed_in_sample_error_matches_the_model(cid):
    # Fails when the model moved since the file was written: rerun the crossval command.
    (rec,) = [r for r in select(DOC, "logo") if r["id"] == cid]
    case = BY_ID[cid]
    assert rec["in_sample_error"] == pytest.approx(predict(case) / case.measured - 1, abs=5e-3)


def test_dense_cross_validated_median():
    s = stats([r["error"] for r in select(DOC, "logo", "dense_step_time")])
    assert s["n"] >= 80
    assert s["median"] <= CV_BARS["dense_step_time"]["median"], f"median |error| {s['median']:.1%}"


def test_dense_cross_validated_max():
    worst = [f"{r['id']} {r['error']:+.1%}" for r in select(DOC, "logo", "dense_step_time")
             if abs(r["error"]) > CV_BARS["dense_step_time"]["max"]]
    assert not worst, "; ".join(worst)
    assert check_cv_bars(DOC) == []


# GB200's compute constants were fitted while its NVLink5 curve priced small TP collectives at a
# fraction of their measured bandwidth; with the group-size curve (docs/collectives.md) the dgxc
# NeMo 25.04 GB200 steps come out fast, and the refit that would fix them moves the never-fitted
# Megatron-Bridge GB200 runs from 3 % to 12 % median (validation/analysis.md). The constants are
# kept, so on GB200 a refit without a group does better than the shipped constants with it.
NOT_AT_FIT = {"gb200-nvl72"}


def _mean_errors(topologies) -> tuple[float, float]:
    logo = [r for r in select(DOC, "logo", "dense_step_time") if r["topology"] in topologies]
    return (statistics.mean(abs(r["error"]) for r in logo),
            statistics.mean(abs(r["in_sample_error"]) for r in logo))


def test_out_of_group_error_is_not_smaller_than_in_sample():
    tops = {r["topology"] for r in select(DOC, "logo", "dense_step_time")} - NOT_AT_FIT
    cv, ins = _mean_errors(tops)
    assert cv >= ins * 0.98


@pytest.mark.xfail(strict=True, reason="GB200 constants not refitted after the NVLink5 "
                   "group-size curve (NOT_AT_FIT above)")
def test_gb200_constants_are_at_their_fit():
    cv, ins = _mean_errors(NOT_AT_FIT)
    assert cv >= ins * 0.98


def test_surface_reproduces_the_simulator_inside_its_box():
    case = BY_ID["dgxc-llama31-8b-h100-32g"]
    box = {k: v for k, v in fit_box("dgx-h100").items() if "fp8" not in k}
    surf = build_surface(case, box)
    rng = np.random.default_rng(18)
    for _ in range(3):
        point = {k: float(rng.uniform(*v)) for k, v in box.items()}
        assert surf(point) == pytest.approx(predict(case, point), rel=2e-3)


def test_a_fixed_slice_of_the_cross_validation():
    cases = [BY_ID[i] for i in SLICE]
    records, folds = crossvalidate("dgx-h100", cases, log=lambda _: None)
    logo = [r for r in records if r["scheme"] == "logo"]
    assert sorted(r["id"] for r in logo) == sorted(c.id for c in cases)
    for f in (f for f in folds if f["scheme"] == "logo"):
        out = [r for r in logo if r["fold"] == f["fold"]]
        assert f["train_cases"] == len(cases) - len(out) and len(out) in (2, 3)
        # left-out cases are scored by the full simulator at the fold's constants
        r = out[0]
        case = BY_ID[r["id"]]
        assert r["predicted"] == pytest.approx(predict(case, f["constants"]), rel=1e-12)
        for name, (lo, hi) in fit_box("dgx-h100").items():
            assert lo <= f["constants"][name] <= hi
        # no FP8 case to fit on: the FP8 efficiency is the donor GPU's
        assert f["borrowed"] == ["gpu.fp8_gemm_efficiency"] and f["donor"]
        assert f["constants"]["gpu.fp8_gemm_efficiency"] == \
            shipped(f["donor"], f["borrowed"])["gpu.fp8_gemm_efficiency"]


@pytest.fixture(scope="module")
def gb300():
    """GB300's whole cross-validation rerun (6 groups, 24 cases, two fitted constants: ~3 s),
    fold for fold what ``python -m simulator.validation.crossval`` computes."""
    return crossvalidate("gb300-nvl72", CASES, log=lambda _: None)


def test_a_recomputed_gpu_matches_the_committed_file_and_holds_the_max_bar(gb300):
    records, _ = gb300
    committed = {(r["scheme"], r["id"]): r for r in DOC["residuals"]
                 if r["topology"] == "gb300-nvl72" and r["scheme"] != "fixed"}
    assert {(r["scheme"], r["id"]) for r in records} == set(committed)
    for r in records:  # the committed bars are the current model's, not a stale file's
        assert r["error"] == pytest.approx(committed[(r["scheme"], r["id"])]["error"],
                                           abs=1e-6), r["id"]
    logo = [r for r in records if r["scheme"] == "logo"]
    # the median bar is over every GPU's groups (GB300's own median is 9 %, its tables
    # run on later releases than the fit's); the max bar holds on each GPU
    assert len(logo) == 24
    assert stats([r["error"] for r in logo])["max"] <= CV_BARS["dense_step_time"]["max"]


def test_moe_residuals_cover_every_gpu_and_mark_the_fitted_cases():
    moe = [r for r in DOC["residuals"] if r["category"] == "moe_step_time"]
    cases = [c for c in CASES if c.category == "moe_step_time"]
    assert {r["id"] for r in moe} == {c.id for c in cases}
    assert {r["topology"] for r in moe} >= {"dgx-h100", "gb200-nvl72"}
    for r in moe:
        fitted = (r["category"], r["topology"]) in FITTED_ELSEWHERE
        assert r["in_sample"] == (fitted and not BY_ID[r["id"]].holdout)
    # the report and the intervals count only the out-of-sample ones
    assert all(not r.get("in_sample") for r in select(DOC, "fixed"))
    assert 0 < len(select(DOC, "fixed", "moe_step_time")) < len(moe)
