"""What a new user trips on (issue 33.8): search's headroom, --gpus, GiB, timelines."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main as cli
from simulator.cli.search import DEFAULT_HEADROOM_PCT

SEARCH = ["search", "tiny", "-t", "dgx-h100", "--gpus", "4", "--executor", "serial",
          "--micro-batch-sizes", "1", "--max-context", "1", "--format", "json"]


def _search(capsys, *extra):
    assert cli([*SEARCH, *extra]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_search_leaves_a_default_headroom_and_says_so(capsys):
    doc, err = _search(capsys)
    usable = 81559 * 2**20 / 1e9  # dgx-h100: nvidia-smi's 81,559 MiB
    want = DEFAULT_HEADROOM_PCT / 100 * usable
    assert f"leave {want:.3g} GB free" in err
    assert all(p["memory_margin_GB"] <= usable - want - p["memory_per_gpu_GB"] + 1e-6
               for p in doc["plans"])
    bare, _ = _search(capsys, "--memory-headroom", "0")
    first = doc["plans"][0]
    same = next(p for p in bare["plans"] if p["plan"] == first["plan"]
                and p["recompute"] == first["recompute"])
    assert same["memory_margin_GB"] == pytest.approx(first["memory_margin_GB"] + want, abs=2e-3)


def test_search_help_shows_the_headroom_and_its_reason(capsys):
    with pytest.raises(SystemExit):
        cli(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--memory-headroom" in text and "default 10%" in text and "16.3% max" in text


@pytest.mark.parametrize("bad", ["-1", "100%", "x", "nan", "5%%"])
def test_search_bad_headroom_is_one_line(bad, capsys):
    assert cli([*SEARCH, "--memory-headroom", bad]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_set_headroom_wins_over_the_default(capsys):
    doc, err = _search(capsys, "--set", "training.memory_headroom_GB=1")
    assert "leave" not in err
    p = doc["plans"][0]
    assert p["memory_margin_GB"] == pytest.approx(81559 * 2**20 / 1e9 - 1
                                                  - p["memory_per_gpu_GB"], abs=1e-6)


def test_capacity_reads_as_usable_and_in_gib(capsys):
    assert cli(["memory", "tiny", "-t", "dgx-h100"]) == 0
    out = capsys.readouterr().out
    assert "85.52 GB usable = 79.65 GiB" in out


@pytest.mark.parametrize("argv", [
    ["run", "tiny", "-t", "dgx-h100", "--format", "json"],
    ["time-to-train", "tiny", "-t", "dgx-h100", "--tokens", "1e9", "--runs", "2", "--steps",
     "2", "--format", "json"],
])
def test_gpus_sets_the_data_parallel_size(argv, capsys):
    assert cli([*argv, "--gpus", "16"]) == 0  # tiny: TP2 PP2 -> DP 4
    assert json.loads(capsys.readouterr().out)["num_gpus"] == 16
    assert cli([*argv, "--gpus", "8", "--set", "parallelism.tensor=1"]) == 0  # DP 4 again
    assert json.loads(capsys.readouterr().out)["num_gpus"] == 8


def test_gpus_on_plot_timeline(tmp_path):
    out = tmp_path / "t.png"
    assert cli(["plot", "timeline", "tiny", "-t", "dgx-h100", "--gpus", "8", "-o",
                str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("extra, says", [([], "multiple of TP x PP x CP = 2 x 2 x 1 = 4"),
                                         (["--set", "parallelism.data=1"], "give one of them")])
def test_gpus_that_do_not_divide_are_one_line(extra, says, capsys):
    n = "6" if not extra else "8"
    assert cli(["run", "tiny", "-t", "dgx-h100", "--gpus", n, *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--gpus" in err and says in err


def test_every_figure_a_report_links_is_an_image():
    """reports/sensitivity.md linked a text table saved as .png (issue 33.8)."""
    import re
    from pathlib import Path

    reports = Path(__file__).resolve().parents[1] / "reports"
    checked = 0
    for md in reports.glob("*.md"):
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", md.read_text()):
            path = (md.parent / target).resolve()
            if not path.is_file():
                continue
            head = path.read_bytes()[:256]
            ok = head.startswith(b"\x89PNG") if path.suffix == ".png" else b"<svg" in head \
                or head.startswith(b"<?xml")
            assert ok, f"{md.name} links {target}, which is not a {path.suffix} image"
            checked += 1
    assert checked > 0
