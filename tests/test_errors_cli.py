"""User mistakes: one line on stderr, exit 2. Internal bugs: a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

import simulator.cli.run as run_cmd
from simulator import ConfigError
from simulator.cli.main import main


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, expect", [
    (["run", "tiny", "-t", "dgx-h100", "--set", "parallelism.tensr=2"],
     "did you mean 'tensor'?"),
    (["run", "tiny", "-t", "dgx-h100", "--set", "parallelism.tensor=3"],
     "parallelism.tensor = 3: must divide model.num_attention_heads (16)"),
    (["run", "tiny", "-t", "dgx-h100", "--set-topology", "tiers.1.bandwdith_GBps=2"],
     "override: tiers.1.bandwdith_GBps = 2: unknown field (did you mean 'bandwidth_GBps'?)"),
    (["run", "tiny", "-t", "dgx-h10"], "topology = 'dgx-h10': no such file or shipped name"),
    (["run", "tiny", "-t", "dgx-h100", "--set", "oops"], "expected FIELD=VALUE"),
])
def test_config_error_is_one_line_and_exit_2(capsys, argv, expect):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("clustersim: error: ") and err.count("\n") == 1, err
    assert expect in err


def test_yaml_error_names_file_and_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  name: x\n  name: y\n")
    code, _, err = _cli(capsys, "run", str(bad), "-t", "dgx-h100")
    assert code == 2 and f"{bad}:3: model.name = 'duplicate key'" in err


def test_real_process_exits_2_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "simulator.cli.main", "run", "tiny", "-t",
                           "dgx-h100", "--set", "training.global_batch_size=9"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "training.global_batch_size = 9: must be divisible by" in proc.stderr


def test_internal_bug_keeps_its_traceback(monkeypatch):
    def broken(*_a, **_k):
        raise ZeroDivisionError("a bug, not a user mistake")

    monkeypatch.setattr(run_cmd, "run_result", broken)
    with pytest.raises(ZeroDivisionError):
        main(["run", "tiny", "-t", "dgx-h100"])


def test_message_is_always_one_line_and_survives_bad_repr():
    class Weird:
        def __repr__(self):
            raise RuntimeError("no repr")

    exc = ConfigError("a.b", Weird(), "first line\nsecond\tline", source="f.yaml:3")
    assert exc.message() == "f.yaml:3: a.b = <Weird>: first line second line"
    assert exc.field == "a.b" and exc.allowed.startswith("first")
    long = ConfigError("x", "v" * 500, "ok").message()
    assert len(long) < 120 and "..." in long
