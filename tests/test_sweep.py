"""Sweeps: grid expansion, invalid rows, API = CLI = sweep row, outputs, progress bar."""

from __future__ import annotations

import doctest
import importlib
import io
import json

import pandas as pd
import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.metrics.result import flatten
from simulator.sweep import expand, load_sweep, make_spec, sweep
from simulator.sweep.progress import Progress
from tests.conftest import ROOT

# the package: the attribute simulator.sweep is the sweep() function
sweep_pkg = importlib.import_module("simulator.sweep")


def test_module_example_runs():
    res = doctest.testmod(sweep_pkg)
    assert res.attempted >= 3 and res.failed == 0


def test_expansion_order_product_then_zip():
    spec = make_spec("tiny", "dgx-h100",
                     axes={"parallelism.tensor": [1, 2], "topology": ["dgx-h100", "dgx-a100"]},
                     zip_axes={"parallelism.pipeline": [1, 2], "training.micro_batch_size": [4, 2]})
    pts = expand(spec)
    assert [p.index for p in pts] == list(range(8))
    got = [(p.overrides["parallelism.tensor"], p.topology, p.overrides["parallelism.pipeline"],
            p.overrides["training.micro_batch_size"]) for p in pts]
    assert got[:3] == [(1, "dgx-h100", 1, 4), (1, "dgx-h100", 2, 2), (1, "dgx-a100", 1, 4)]
    assert got[-1] == (2, "dgx-a100", 2, 2)


@pytest.mark.parametrize("kwargs, field, text", [
    ({"axes": {"parallelism.tensr": [1]}}, "axes.parallelism.tensr", "did you mean 'tensor'"),
    ({"zip_axes": {"parallelism.tensor": [1, 2], "parallelism.pipeline": [1]}}, "zip_axes",
     "equal lengths"),
    ({"axes": {"num_gpus": [8], "parallelism.data": [1]}}, "axes.num_gpus", "parallelism.data"),
    ({"axes": {"topology.gpu.hbm_G": [40]}}, "axes.topology.gpu.hbm_G", "hbm_GB"),
])
def test_bad_axes_are_config_errors(kwargs, field, text):
    with pytest.raises(ConfigError) as err:
        make_spec("tiny", "dgx-h100", **kwargs)
    assert err.value.field == field and text in err.value.message()


def test_invalid_combinations_are_rows_with_reasons():
    df = sweep("tiny", "dgx-h100", executor="serial",
               axes={"topology": ["dgx-h100", "no-such-cluster"],
                     "parallelism.tensor": [2, 3, 16], "num_gpus": [8, 12, 32]})
    assert len(df) == 18 and list(df.config_id) == list(range(18))
    ok = df[df.status == "ok"]
    assert len(ok) == 1 and int(ok["parallelism.tensor"].iloc[0]) == 2
    assert int(ok["parallelism.data"].iloc[0]) == 2 and ok.tokens_per_s.iloc[0] > 0
    bad = df[df.status == "invalid"].set_index("config_id")
    assert len(bad) == 17 and bad.reason.notna().all()
    assert "must be divisible by micro_batch_size * data" in bad.reason[1]  # TP2 PP2 on 12
    assert "must be a multiple of tensor*pipeline*context" in bad.reason[3]  # TP3 PP2 on 8
    assert "must divide model.num_attention_heads" in bad.reason[4]  # TP3 on 12 GPUs
    assert "nvlink domain" in bad.reason[8]  # TP16 > 8 GPUs of NVLink
    assert "no such file or shipped name" in bad.reason[9]
    assert bad.loc[8, "num_gpus"] == 32 and bad.loc[8, "parallelism.tensor"] == 16
    assert bad.loc[8, "parallelism.data"] == 1 and pd.isna(bad.loc[8, "tokens_per_s"])


def test_api_cli_and_sweep_row_agree(capsys):
    over = {"parallelism.tensor": 4, "training.micro_batch_size": 1}
    assert main(["run", "tiny", "--topology", "dgx-h100", "--set", "parallelism.tensor=4",
                 "--set", "training.micro_batch_size=1", "--format", "json"]) == 0
    cli = flatten(json.loads(capsys.readouterr().out))
    api = flatten(simulate("tiny", "dgx-h100", **over).to_dict())
    row = sweep("tiny", "dgx-h100", axes={k: [v] for k, v in over.items()},
                executor="serial").iloc[0]
    assert cli == api
    for key, value in api.items():
        got = row[key]
        assert got == value or (value == "" and pd.isna(got)), key
    assert row.step_time_s > 0


def test_cli_sweep_writes_csv_and_parquet(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("workload: tiny\ntopology: dgx-h100\n"
                    "axes:\n  parallelism.tensor: [1, 2, 5]\n"
                    "  training.micro_batch_size: [1, 2]\n")
    out, pq = tmp_path / "r.csv", tmp_path / "r.parquet"
    assert main(["sweep", str(spec), "-o", str(out), "--parquet", str(pq),
                 "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "6 configurations" in err and "2 invalid" in err
    api = sweep("tiny", "dgx-h100", axes={"parallelism.tensor": [1, 2, 5],
                                          "training.micro_batch_size": [1, 2]},
                executor="serial")
    csv = pd.read_csv(out)
    back = pd.read_parquet(pq)
    assert list(csv.columns) == list(api.columns) == list(back.columns)
    for col in ("tokens_per_s", "step_time_s", "memory_per_gpu_GB"):
        pd.testing.assert_series_equal(back[col], api[col])
        assert csv[col].tolist() == pytest.approx(api[col].tolist(), rel=1e-15, nan_ok=True)
    assert list(back.status) == ["ok", "ok", "ok", "ok", "invalid", "invalid"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files


def test_duplicate_points_are_simulated_once_and_store_is_reused(tmp_path):
    axes = {"parallelism.tensor": [1, 2, 1], "training.micro_batch_size": [1, 2]}
    first = sweep("tiny", "dgx-h100", axes={"parallelism.tensor": [1]}, executor="serial",
                  store=tmp_path)
    assert first.attrs["counts"]["simulated"] == 1  # TP1 with the base MBS 2
    df = sweep("tiny", "dgx-h100", axes=axes, executor="serial", store=tmp_path)
    c = df.attrs["counts"]
    assert (c["configurations"], c["distinct"], c["from_store"], c["simulated"]) == (6, 4, 1, 3)
    assert df.config_key[0] == df.config_key[4] and df.config_key[0] != df.config_key[1]
    plain = sweep("tiny", "dgx-h100", axes=axes, executor="serial")
    pd.testing.assert_frame_equal(df, plain)
    again = sweep("tiny", "dgx-h100", axes=axes, executor="serial", store=tmp_path)
    assert again.attrs["counts"]["simulated"] == 0
    assert again.attrs["counts"]["from_store"] == 4
    pd.testing.assert_frame_equal(again, plain)


def test_shipped_example_is_small_and_loads():
    spec = load_sweep(ROOT / "sweeps" / "llama3-70b-plans.yaml")
    points = expand(spec)
    assert 0 < len(points) < 30
    assert {p.topology for p in points} == {"dgx-h100", "gb200-nvl72"}


def test_progress_bar_format_and_tty_gate():
    now = [0.0]
    out = io.StringIO()
    bar = Progress(40, "sweep", stream=out, enabled=True, clock=lambda: now[0])
    bar.skip(10)
    now[0] = 5.0
    bar.update(10)
    text = bar.render()
    # store hits (skip) count but do not rate: 10 simulated in 5 s = 2/s, 20 left = 10 s
    assert "20/40" in text and " 50%" in text and "2.00it/s" in text and "ETA 00:10" in text
    bar.close()
    assert out.getvalue().endswith("\n") and "\r" in out.getvalue()
    quiet = io.StringIO()
    with Progress(5, stream=quiet) as bar2:  # StringIO is not a terminal
        bar2.update(5)
    assert quiet.getvalue() == ""
