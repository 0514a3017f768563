"""The validation machinery itself: case loading, held-out rule, FLOP conversion, report,
figures and the ``clustersim validate`` command (fast: collectives and layers only)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from simulator.cli.main import main
from simulator.config import load_workload
from simulator.errors import ConfigError
from simulator.metrics.flops import model_flops_per_step
from simulator.validation import (
    Case,
    check_bars,
    load_cases,
    mark_holdout,
    narayanan_flops,
    precision,
    predict,
    render_markdown,
    run_cases,
    summarize,
)
from simulator.validation.fit import default_params, fit, objective, training_cases
from simulator.validation.report import Row, write_atomic

LAYER_CASES = load_cases(categories=["layer_time"])
GPT = {"model": {"num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96,
                 "vocab_size": 51200, "seq_length": 2048},
       "parallelism": {"tensor": 8, "pipeline": 12, "data": 4},
       "training": {"global_batch_size": 1536}}


def test_narayanan_flops_is_model_flops_plus_the_recompute_forward():
    # Eq. 3 = 4/3 of the layers' training FLOPs (forward counted twice) + 6*B*s*h*V logits.
    w = load_workload(GPT)
    B, s, h, V = 1536, 2048, 12288, 51200
    logits = 6.0 * B * s * h * V
    assert narayanan_flops(w) == pytest.approx(4 / 3 * (model_flops_per_step(w) - logits)
                                               + logits, rel=1e-12)


def test_tflops_rows_become_step_times():
    by_id = {c.id: c for c in load_cases(categories=["dense_step_time"])}
    c = by_id["narayanan2021-t2-175b-384g"]
    w = load_workload(GPT)
    assert c.measured == pytest.approx(narayanan_flops(w) / (153e12 * 384))
    assert "153 TFLOP/s" in c.derived
    assert by_id["dgxc-gpt3-175b-h100-128g"].measured == 8.91


def _case(i: int, cat: str = "collective_busbw", topo: str = "dgx-h100") -> Case:
    return Case(id=f"c{i}", group="g", category=cat, topology=topo, source="s", measured=1.0,
                spec={})


def test_every_third_case_per_category_and_topology_is_held_out():
    cases = [_case(i, topo="dgx-h100" if i % 2 else "dgx-a100") for i in range(12)]
    held = [c.id for c in mark_holdout(cases) if c.holdout]
    # a100: c0 c2 c4 c6 c8 c10 -> c4, c10 ; h100: c1 c3 c5 c7 c9 c11 -> c5, c11
    assert held == ["c4", "c5", "c10", "c11"]


# Held out when the rule was committed (before any fit); cases added later must not move them.
HELD_OUT_BEFORE_FP8 = {
    "narayanan2021-t1-7.5b", "narayanan2021-t1-76.1b", "narayanan2021-t1-529.6b",
    "narayanan2021-t2-175b-768g", "narayanan2021-t2-530b-1120g", "dgxc-gpt3-175b-h100-512g",
    "dgxc-nemotron4-15b-h100-16g", "dgxc-nemotron4-340b-h100-128g", "dgxc-llama31-8b-h100-8g",
    "dgxc-llama31-8b-h100-64g", "dgxc-llama31-70b-h100-128g", "dgxc-llama31-70b-h100-1024g",
    "dgxc-llama31-405b-h100-1152g"}


def test_added_fp8_cases_keep_the_earlier_held_out_set():
    cases = [c for c in load_cases(categories=["dense_step_time"])
             if c.topology in ("dgx-a100", "dgx-h100")]
    older = [c for c in cases if precision(c) != "fp8"]
    assert {c.id for c in older if c.holdout} == HELD_OUT_BEFORE_FP8
    h100 = [c for c in cases if c.topology == "dgx-h100"]
    fp8 = [c for c in h100 if precision(c) == "fp8"]
    assert fp8 and h100[-len(fp8):] == fp8  # appended after every older case of the stratum
    held = [c.id for c in fp8 if c.holdout]
    assert held[:2] == ["dgxc-gpt3-175b-h100-fp8-256g", "dgxc-gpt3-175b-h100-fp8-2048g"]
    assert {precision(c) for c in cases} == {"fp16", "bf16", "fp8"}
    assert precision(load_cases(categories=["collective_busbw"])[0]) == ""


def test_loader_expands_groups_and_rejects_bad_input(tmp_path):
    doc = [{"group": "x", "category": "collective_busbw", "topology": "dgx-a100",
            "source": "a  b", "op": "all_reduce", "ranks": 8,
            "points": [{"bytes": 2**29, "busbw_GBps": 221.58}, {"bytes": 2**33,
                                                                 "busbw_GBps": 231.58}]}]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(doc))
    cases = load_cases(tmp_path)
    assert [c.id for c in cases] == ["x-536870912", "x-8589934592"]
    assert cases[0].source == "a b" and cases[0].spec["ranks"] == 8
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="unique"):
        load_cases(tmp_path)
    (tmp_path / "b.yaml").write_text(yaml.safe_dump([{**doc[0], "group": "y",
                                                      "category": "nope"}]))
    with pytest.raises(ConfigError, match="category"):
        load_cases(tmp_path)
    with pytest.raises(ConfigError, match="no"):
        load_cases(tmp_path / "missing")


def test_layer_rows_give_a_forward_and_a_backward_case():
    cases = load_cases(categories=["layer_time"])
    assert [c.spec["phase"] for c in cases[:2]] == ["fwd", "bwd"]
    assert cases[0].measured == pytest.approx(7.7e-3) and cases[1].measured == pytest.approx(
        11.9e-3)
    f, b = run_cases(cases[:2])
    assert b.predicted > f.predicted > 0


def test_summary_bars_and_markdown():
    rows = [Row(_case(0), 1.05), Row(_case(1), 0.9), Row(_case(2), 1.3)]
    rows = [Row(c, r.predicted) for c, r in zip(mark_holdout([r.case for r in rows]), rows,
                                                 strict=True)]
    s = summarize(rows)["collective_busbw"]
    assert s["all"]["n"] == 3 and s["all"]["max"] == pytest.approx(0.3)
    assert s["held-out"]["n"] == 1 and s["train"]["median"] == pytest.approx(0.075)
    assert check_bars(summarize(rows)) == ["collective_busbw: max |error| 30.0% > 10%"]
    text = render_markdown(rows)
    assert "| c2 | dgx-h100 | 1.0 GB/s | 1.3 GB/s | +30.0% | yes |" in text
    assert "BROKEN" in text and text == render_markdown(rows)


def test_write_atomic_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "sub" / "r.md"
    write_atomic(target, "one")
    write_atomic(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["r.md"]


def test_cli_writes_report_and_figures(tmp_path, capsys):
    out = tmp_path / "validation.md"
    code = main(["validate", "--category", "collective_busbw", "--category", "layer_time",
                 "--out", str(out), "--check"])
    assert code == 0
    text = out.read_text()
    assert "## Summary" in text and "korthikanti2022-t4-baseline-fwd" in text
    for name in ("validation_scatter.png", "validation_collectives.png"):
        assert (tmp_path / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "collective_busbw" in capsys.readouterr().out


def test_cli_check_fails_on_a_broken_bar(tmp_path):
    doc = [{"group": "bad", "category": "collective_busbw", "topology": "dgx-a100",
            "source": "invented", "op": "all_reduce", "ranks": 8,
            "points": [{"bytes": 2**33, "busbw_GBps": 1000.0}]}]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    args = ["validate", "--cases", str(tmp_path), "--out", str(tmp_path / "v.md"),
            "--no-figures"]
    assert main(args) == 0
    assert main([*args, "--check"]) == 1
    assert main(["validate", "--cases", str(tmp_path / "none"), "--out",
                 str(tmp_path / "v.md")]) == 2


def test_fit_recovers_a_known_constant_from_synthetic_measurements():
    # Layer cases cost one op list each (fast); their "measurements" are the model's own
    # predictions at gemm_efficiency 0.7, so the fit must find 0.7 again from 0.8.
    truth = {"gpu.gemm_efficiency": 0.7}
    cases = [replace(c, measured=predict(c, truth)) for c in training_cases("dgx-a100",
                                                                              LAYER_CASES)]
    assert len(cases) == 7 and objective(cases, truth) == pytest.approx(0.0, abs=1e-12)
    best = fit(cases, {"gpu.gemm_efficiency": 0.8}, ["gpu.gemm_efficiency"], sweeps=1,
               iters=12, log=lambda line: None)
    assert best["gpu.gemm_efficiency"] == pytest.approx(0.7, abs=0.003)


def test_fit_defaults_add_fp8_efficiency_only_when_fp8_cases_are_fitted():
    dense = load_cases(categories=["dense_step_time"])
    h100 = training_cases("dgx-h100", dense)
    assert "gpu.fp8_gemm_efficiency" in default_params(h100)
    assert not any(c.holdout for c in h100)
    bf16 = [c for c in h100 if precision(c) == "bf16"]
    assert "gpu.fp8_gemm_efficiency" not in default_params(bf16)
    assert "gpu.fp8_gemm_efficiency" not in default_params(training_cases("dgx-a100", dense))


def test_fit_defaults_hold_a_kernel_benchmark_attention_figure():
    # Hopper / Blackwell attention is a cuDNN kernel benchmark's rate: the default fit holds
    # it; A100's TE figure is fitted
    dense = load_cases(categories=["dense_step_time"])
    for gpu in ("dgx-h100", "gb200-nvl72"):
        params = default_params(training_cases(gpu, dense))
        assert "gpu.attention_efficiency" not in params and "gpu.gemm_efficiency" in params
    assert "gpu.attention_efficiency" in default_params(training_cases("dgx-a100", dense))
