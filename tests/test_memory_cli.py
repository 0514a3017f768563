"""``clustersim memory``: table, json, and one-line config errors."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main as cli


@pytest.fixture
def run(monkeypatch, capsys):
    # Dispatch through the real entry point (it loads only the chosen subcommand's module).

    def _run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["memory", *argv])
        out = capsys.readouterr()
        return code, out.out, out.err
    return _run


def test_registered():
    assert cli.COMMANDS["memory"][0] == "simulator.cli.memory"


def test_table_per_stage_and_verdict(run):
    code, out, err = run("llama3-70b", "--topology", "dgx-h100")
    assert code == 0 and not err
    lines = out.strip().splitlines()
    header = next(line for line in lines if line.split()[:1] == ["stage"])
    assert header.split() == ["stage", "params", "fp8cpy", "grads", "optim", "activ", "comm",
                              "frmwk", "total", "fits"]
    rows = [line for line in lines if line.split()[:1] and line.split()[0].isdigit()]
    assert len(rows) == 4
    assert lines[-1].startswith("FITS: stage 0 needs")


def test_table_says_clearly_when_it_does_not_fit(run):
    code, out, _ = run("llama3-70b", "-t", "dgx-h100", "--set", "parallelism.tensor=1",
                       "--set", "parallelism.pipeline=1", "--set", "parallelism.data=1",
                       "--set", "parallelism.virtual_pipeline=null",
                       "--set", "parallelism.pipeline_schedule=1f1b",
                       "--set", "parallelism.sequence_parallel=false")
    assert code == 0
    assert "DOES NOT FIT: stage 0 needs" in out and "biggest: optimizer" in out


def test_json(run):
    code, out, _ = run("gpt3-175b", "-t", "dgx-h100", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert len(doc["stages"]) == 8 and doc["capacity_GB"] == pytest.approx(81559 * 2**20 / 1e9)
    worst = doc["stages"][doc["worst_stage"]]
    assert worst["total"] == pytest.approx(doc["memory_per_gpu_GB"])
    assert sum(doc["memory_breakdown_GB"].values()) == pytest.approx(doc["memory_per_gpu_GB"])
    assert doc["fits"] is (doc["memory_per_gpu_GB"] <= doc["capacity_GB"])
    assert doc["margin_GB"] == pytest.approx(doc["capacity_GB"] - doc["memory_per_gpu_GB"])


def test_table_shows_the_new_components(run):
    code, out, _ = run("llama3-8b", "-t", "dgx-h100", "--set", "parallelism.tensor=1",
                       "--set", "parallelism.data=8",
                       "--set", "parallelism.sequence_parallel=false",
                       "--set", "training.precision=fp8", "--set", "training.fp8_param_gather=true",
                       "--set", "training.grad_reduce_in_fp32=false",
                       "--set", "training.cpu_offloading=true",
                       "--set", "training.cpu_offloading_num_layers=8",
                       "--set", "training.recompute_granularity=selective",
                       "--set", "training.recompute_modules=[layernorm,mlp]",
                       "--set", "training.memory_headroom_GB=2")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["stage"]).split()
    assert "fp8cpy" in header and header[-1] == "host"
    assert "recompute selective [layernorm, mlp]" in out
    assert "weights fp8 (fp8_param_gather), grads bf16" in out
    assert "8 layers' activations offloaded to host" in out and "2 GB headroom" in out


@pytest.mark.parametrize("argv", [
    ("tiny", "-t", "dgx-h100", "--set", "parallelism.tensor=0"),
    ("tiny", "-t", "dgx-h100", "--expert-load-factor", "0"),
])
def test_bad_input_exits_2_with_one_line(run, argv):
    code, out, err = run(*argv)
    assert code == 2 and not out
    assert err.count("\n") == 1 and err.startswith("clustersim: error:")
