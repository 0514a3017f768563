"""-o's extension picks the format or is refused; no empty field names; --only and --gpus
are strict; search JSON is byte-identical run to run (issue 33.6)."""

from __future__ import annotations

import pytest

from simulator import ConfigError, simulate
from simulator.cli.main import main as cli


@pytest.mark.parametrize("argv, name", [
    (["memory", "tiny", "-t", "dgx-h100"], "m.csv"),
    (["time-to-train", "tiny", "-t", "dgx-h100", "--tokens", "1e9", "--runs", "2",
      "--steps", "2"], "t.csv"),
    (["sensitivity", "tiny", "-t", "dgx-h100"], "s.png"),
    (["run", "tiny", "-t", "dgx-h100"], "r.yaml"),
    (["run", "tiny", "-t", "dgx-h100", "--format", "table"], "r.json"),
    (["collective", "-t", "dgx-h100", "--op", "all_reduce", "--ranks", "8"], "c.parquet"),
    (["workload", "--from-hf", "tests/data/hf/llama3-8b/config.json", "--plan", "tiny"],
     "w.json"),
    (["sweep", "SPEC"], "s.xlsx"),
    (["validate", "--no-figures"], "v.csv"),
])
def test_an_extension_naming_another_format_is_refused(argv, name, tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("workload: tiny\ntopology: dgx-h100\naxes:\n  parallelism.tensor: [1]\n")
    out = tmp_path / name
    assert cli([str(spec) if a == "SPEC" else a for a in argv] + ["-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--output" in err and name in err
    assert not out.exists()


@pytest.mark.parametrize("name, head", [("r.json", "{"), ("r.txt", "tiny"), ("r", "tiny")])
def test_an_extension_naming_a_format_picks_it(name, head, tmp_path):
    out = tmp_path / name
    assert cli(["run", "tiny", "-t", "dgx-h100", "-o", str(out)]) == 0
    assert out.read_text().startswith(head)


def test_sweep_dash_o_parquet_writes_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    pd = pytest.importorskip("pandas")
    spec = tmp_path / "s.yaml"
    spec.write_text("workload: tiny\ntopology: dgx-h100\naxes:\n  parallelism.tensor: [1, 2]\n")
    out = tmp_path / "x.parquet"
    assert cli(["sweep", str(spec), "-o", str(out), "--workers", "1"]) == 0
    assert out.read_bytes()[:4] == b"PAR1" and len(pd.read_parquet(out)) == 2


@pytest.mark.parametrize("path", ["", ".", "model.", ".model", "model..num_layers"])
def test_errors_never_name_an_empty_field(path):
    with pytest.raises(ConfigError) as err:
        simulate("tiny", "dgx-h100", {path: 3})
    msg = err.value.message()
    assert err.value.field.strip() and not msg.startswith((" ", "=")) and " = " in msg


def test_an_error_with_no_field_name_says_so():
    assert ConfigError("", 3, "x").message().startswith("(a field with no name) = 3")


def test_sensitivity_only_matching_nothing_is_an_error(capsys):
    assert cli(["sensitivity", "tiny", "-t", "dgx-h100", "--only", "gpu.nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("clustersim: error: --only = 'gpu.nosuch'") and err.count("\n") == 1


@pytest.mark.parametrize("gpus", ["8,,16", ",8", "8,", "8, ,16"])
def test_search_gpus_with_an_empty_entry_is_refused(gpus, capsys):
    assert cli(["search", "tiny", "-t", "dgx-h100", "--gpus", gpus]) == 2
    assert "--gpus" in capsys.readouterr().err


def test_search_json_is_the_same_bytes_twice(tmp_path):
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    for out in outs:
        assert cli(["search", "tiny", "-t", "dgx-h100", "--gpus", "4", "--executor", "serial",
                    "--micro-batch-sizes", "1", "--max-context", "1", "-o", str(out)]) == 0
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert b"elapsed" not in outs[0].read_bytes()


@pytest.mark.parametrize("step", ["x", None, True, [0.1]])
def test_sensitivity_step_of_the_wrong_type_is_a_config_error(step):
    """Found by the fuzz: a string step reached a bare comparison (TypeError)."""
    from simulator.sensitivity import sensitivity

    with pytest.raises(ConfigError) as err:
        sensitivity("tiny", "dgx-h100", step=step, only=["gpu.peak"])
    assert err.value.field == "step"
