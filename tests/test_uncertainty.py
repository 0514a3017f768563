"""Intervals on predictions from cross-validated residuals (simulator/metrics/uncertainty.py)."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.metrics import uncertainty
from simulator.metrics.uncertainty import conformal_q, interval, load_residuals

H100 = "H100-SXM5-80GB"


def _rec(err, scheme="logo", gpu=H100, prec="bf16", n=64, cat="dense_step_time", **axes):
    return {"error": err, "scheme": scheme, "gpu": gpu, "precision": prec, "num_gpus": n,
            "category": cat, "topology": gpu, "fold": "f",
            "axes": {"tp": 8, "pp": 4, "cp": 1, "ep": 1, "vp": 1, **axes}}


@pytest.fixture
def synthetic(tmp_path):
    res = [_rec(e) for e in (0.01, -0.02, 0.03, -0.04, 0.05)]
    res += [_rec(e, n=512) for e in (0.0, 0.01)]
    res += [_rec(e, scheme="loso") for e in (0.02, -0.03)]
    res += [_rec(0.1, gpu="A100"), _rec(0.2, "loso", "A100"), _rec(-0.2, "loso", "A100")]
    res += [_rec(0.01, gpu="GB200"), _rec(0.3, "loso", "GB200")]  # LOSO on borrowed constants
    res += [_rec(e, scheme="unseen_gpu") for e in (0.3, -0.1, 0.25)]
    folds = [{"scheme": "loso", "topology": "GB200", "fold": "f", "donor": H100}]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"residuals": res, "folds": folds}))
    return path


def test_conformal_quantile_is_the_ceil_n_plus_1_rank():
    errs = [0.01, -0.02, 0.03, 0.04, -0.05, 0.06, 0.07, 0.08, 0.09]
    # n = 9, coverage 0.8: rank ceil(10 * 0.8) = 8 -> |log(1.08)|
    assert conformal_q(errs, 0.8) == pytest.approx(math.log1p(0.08))
    assert conformal_q(errs[:3], 0.8) == pytest.approx(math.log1p(0.03))  # rank > n: largest


def test_inside_the_validated_space(synthetic):
    iv = interval(10.0, "dense_step_time", H100, "bf16", 128, {"tp": 8, "pp": 4},
                  path=synthetic)
    # out-of-group and out-of-source residuals of the stratum
    q = conformal_q([0.01, -0.02, 0.03, -0.04, 0.05, 0.0, 0.01, 0.02, -0.03])
    assert (iv.low, iv.high) == pytest.approx((10 * math.exp(-q), 10 * math.exp(q)))
    assert iv.notes == () and "9 cross-validated residuals" in iv.basis


def test_a_single_source_gpu_borrows_the_out_of_source_spread(synthetic):
    # GB200's only LOSO residual ran on borrowed constants (an unseen GPU, not a new source):
    # it is replaced by the other GPUs' genuine out-of-source residuals.
    iv = interval(10.0, "dense_step_time", "GB200", "bf16", 64, {"tp": 8}, path=synthetic)
    assert "other GPUs" in iv.basis and "5 cross-validated" in iv.basis
    assert iv.high == pytest.approx(10 / 0.8)  # the largest of 5: |log(1 - 0.2)|


def test_one_step_away_widens_and_says_why(synthetic):
    cp = interval(10.0, "dense_step_time", H100, "bf16", 128, {"tp": 8, "cp": 2},
                  path=synthetic)
    assert cp.high > 10 * math.exp(0.05) and "CP" in cp.notes[0]
    gpu = interval(10.0, "dense_step_time", "B300", "bf16", 128, {"tp": 8}, path=synthetic)
    assert "unseen GPU" in gpu.basis and gpu.high == pytest.approx(10 * 1.3)
    assert "B300 has no validated dense case" in gpu.notes[0]
    big = interval(10.0, "dense_step_time", H100, "bf16", 4096, {"tp": 8}, path=synthetic)
    assert "validated 64-512" in big.notes[0] and big.low is not None


def test_far_outside_gives_no_interval(synthetic):
    far = interval(10.0, "dense_step_time", "B300", "bf16", 128, {"tp": 8, "cp": 4},
                   path=synthetic)
    assert far.low is None and far.high is None and "far outside" in far.notes[0]
    huge = interval(10.0, "dense_step_time", H100, "bf16", 64 * 512, {"tp": 8},
                    path=synthetic)
    assert huge.low is None
    moe = interval(10.0, "moe_step_time", H100, "bf16", 64, {"tp": 8}, path=synthetic)
    assert moe.low is None  # no MoE residuals at all


def test_committed_intervals_cover_left_out_sources_at_about_their_rate():
    # Each out-of-source dense residual judged by an interval built as for a user's plan but
    # from the residuals of the *other sources* only: the coverage a new source would get.
    res = [r for r in load_residuals() if r["category"] == "dense_step_time"
           and r["scheme"] in ("logo", "loso") and (r["scheme"] == "logo" or r["new_source"])]
    hits = []
    for r in (r for r in res if r["scheme"] == "loso"):
        others = [o["error"] for o in res if o["source"] != r["source"] and o["gpu"] == r["gpu"]
                  and o["precision"] == r["precision"]]
        if len(others) >= 4:
            hits.append(abs(math.log1p(r["error"])) <= conformal_q(others))
    assert len(hits) >= 40
    assert 0.6 <= sum(hits) / len(hits) <= 0.97, sum(hits) / len(hits)


def test_result_api_and_cli_carry_the_interval(capsys):
    r = simulate("llama3-8b", "dgx-h100")
    iv = r.step_time_interval_s
    assert iv["low"] < r.step_time_s < iv["high"] and r.interval_coverage == 0.8
    assert r.tokens_per_s_interval["low"] == pytest.approx(r.tokens_per_s * r.step_time_s
                                                           / iv["high"])
    assert r.mfu_interval["high"] == pytest.approx(r.mfu * r.step_time_s / iv["low"])
    assert main(["run", "llama3-8b", "-t", "dgx-h100"]) == 0
    out = capsys.readouterr().out
    assert f"({iv['low']:#.3g}-{iv['high']:#.3g} s, 80 %)" in out


def test_uncertainty_module_is_cheap_to_import():
    tree = ast.parse(Path(uncertainty.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module}
    assert not names & {"pandas", "scipy", "simulator"}
    assert uncertainty.RESIDUALS.is_file()
