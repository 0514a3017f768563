"""``clustersim plot``: every kind writes an image; user mistakes exit 2 with one line."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from simulator.cli import main as cli
from simulator.report import simulate_run


@pytest.fixture
def plot(monkeypatch, capsys):

    def _run(*argv: str) -> tuple[int, str]:
        code = cli.main(["plot", *map(str, argv)])
        return code, capsys.readouterr().err
    return _run


def png_ok(path) -> bool:
    data = path.read_bytes()
    w, h = struct.unpack(">II", data[16:24])
    return data[:8] == b"\x89PNG\r\n\x1a\n" and 300 <= w <= 3000 and 200 <= h <= 2000


def test_registered():
    assert cli.COMMANDS["plot"][0] == "simulator.cli.plot"


def test_breakdown_of_workloads_on_topologies(plot, tmp_path):
    out = tmp_path / "b.png"
    code, err = plot("breakdown", "tiny", "tiny,parallelism.pipeline_schedule=gpipe",
                     "-t", "dgx-h100", "-t", "gb200-nvl72", "-o", out)
    assert code == 0, err
    assert png_ok(out)


def test_breakdown_from_csv_as_svg(plot, tmp_path):
    runs = [simulate_run("tiny", "dgx-h100"), simulate_run("tiny", "dgx-a100")]
    table = pd.DataFrame([r.result.to_series() for r in runs])
    table["status"] = "ok"
    csv = tmp_path / "sweep.csv"
    table.to_csv(csv, index=False)
    out = tmp_path / "b.svg"
    assert plot("breakdown", "--csv", csv, "-o", out)[0] == 0
    assert ET.parse(out).getroot().tag.endswith("svg")


@pytest.mark.parametrize("kind,workload", [("timeline", "tiny"), ("memory", "tiny"),
                                           ("expert-load", "mixtral-8x7b")])
def test_single_configuration_kinds(plot, tmp_path, kind, workload):
    out = tmp_path / f"{kind}.png"
    code, err = plot(kind, workload, "--topology", "dgx-h100", "-o", out)
    assert code == 0, err
    assert png_ok(out)


def test_scaling_from_csv(plot, tmp_path):
    csv = tmp_path / "s.csv"
    pd.DataFrame({"label": ["a", "a", "b", "b"], "num_gpus": [8, 16, 8, 16],
                  "tokens_per_s": [1e5, 1.9e5, 2e5, 3.5e5], "mfu": [.5, .48, .4, .35]}
                 ).to_csv(csv, index=False)
    assert plot("scaling", "--csv", csv, "-o", tmp_path / "s.png")[0] == 0
    assert png_ok(tmp_path / "s.png")


@pytest.mark.parametrize("argv,needle", [
    (["timeline", "nope", "-t", "dgx-h100"], "workload"),
    (["timeline", "tiny", "-t", "dgx-h100", "--set", "parallelism.tensor=3"], "tensor"),
    (["expert-load", "tiny", "-t", "dgx-h100"], "model.moe"),
    (["breakdown", "tiny"], "--topology"),
    (["breakdown", "--csv", "missing.csv"], "no such file"),
    (["scaling", "--csv", "missing.csv"], "no such file"),
])
def test_user_mistakes_exit_2(plot, tmp_path, argv, needle):
    out = tmp_path / "x.png"
    code, err = plot(*argv, "-o", out)
    assert code == 2
    assert err.startswith("clustersim: error:") and len(err.strip().splitlines()) == 1
    assert needle in err
    assert not out.exists()


def test_unknown_extension_exits_2(plot, tmp_path):
    code, err = plot("memory", "tiny", "-t", "dgx-h100", "-o", tmp_path / "m.pdf")
    assert code == 2 and ".png or .svg" in err
