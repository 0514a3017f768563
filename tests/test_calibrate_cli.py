"""``clustersim calibrate`` from the command line: sizes as nccl-tests writes them, and a report
for hardware whose interval claims no coverage (an uncalibrated base)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli.calibrate import size_bytes
from simulator.cli.main import main
from simulator.errors import ConfigError

LOG = Path(__file__).parent / "data" / "calibrate" / "mi300x_all_reduce_perf_8gpu.txt"


@pytest.mark.parametrize(("text", "nbytes"), [("0", 0), ("4096", 4096), ("32M", 32 * 2**20),
                                              ("32MiB", 32 * 2**20), ("1G", 2**30),
                                              ("512k", 512 * 2**10), ("1.5e3", 1500)])
def test_min_bytes_takes_nccl_tests_sizes(text, nbytes):
    assert size_bytes(text) == nbytes


@pytest.mark.parametrize("text", ["-1", "nan", "1XB", "", "inf", "M"])
def test_min_bytes_refuses_what_is_not_a_size(text):
    with pytest.raises(ConfigError, match="--min-bytes"):
        size_bytes(text)


def test_uncalibrated_base_writes_its_report_with_coverage_unknown(tmp_path, capsys):
    out, rep = tmp_path / "mine.yaml", tmp_path / "fit.md"
    assert main(["calibrate", "mi300x", "--measurements", str(LOG), "--min-bytes", "1MiB",
                 "-o", str(out), "--report", str(rep)]) == 0
    text = rep.read_text()
    assert "coverage unknown" in text and out.is_file()
    assert "tiers.0.efficiency" in capsys.readouterr().out


def test_a_bad_min_bytes_writes_nothing(tmp_path, capsys):
    out = tmp_path / "mine.yaml"
    assert main(["calibrate", "mi300x", "--measurements", str(LOG), "--min-bytes", "1XB",
                 "-o", str(out)]) == 2
    assert not out.exists()
    assert capsys.readouterr().err.count("\n") == 1
