"""Installs: shipped names resolve from package data, `clustersim list`, missing extras.

The real wheel is built and installed by `.ci/wheel-check` (CI); these tests check the
lookup itself against an installed-like layout (no repository folders, the YAML under
``simulator/shipped/``) from a working directory that has none either.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from simulator import ConfigError, simulate
from simulator.cli.main import main
from simulator.config import loader
from simulator.sweep import load_sweep
from simulator.sweep.runner import write_parquet

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Only an installed copy of the shipped folders exists; cwd is elsewhere."""
    pkg = tmp_path / "site-packages" / "simulator" / "shipped"
    for folder in ("workloads", "topologies", "sweeps"):
        shutil.copytree(ROOT / folder, pkg / folder)
    monkeypatch.setattr(loader, "REPO_ROOT", tmp_path / "no-checkout")
    monkeypatch.setattr(loader, "INSTALLED_ROOT", pkg)
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    return pkg


def test_shipped_names_resolve_from_package_data(installed):
    path = loader.resolve_path("dgx-h100", "topologies")
    assert path == installed / "topologies" / "dgx-h100.yaml"
    assert simulate("tiny", "dgx-h100").step_time_s > 0
    assert load_sweep("llama3-70b-plans").base_dir == (installed / "sweeps").resolve()


def test_unknown_name_lists_the_installed_ones(installed):
    with pytest.raises(ConfigError, match=r"did you mean 'llama3-8b'.*shipped: deepseek-v3"):
        loader.resolve_path("llama3-8", "workloads")


def test_list_prints_every_kind(installed, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for kind in ("workloads:", "topologies:", "sweeps:", "  tiny", "  gb200-nvl72",
                 "  llama3-70b-plans"):
        assert kind in out
    assert main(["list", "topologies", "--format", "json"]) == 0
    assert '"dgx-h100"' in capsys.readouterr().out


def test_missing_extra_is_one_line_with_the_install_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    with pytest.raises(ConfigError, match=r'pip install "clustersim\[parquet\]"'):
        write_parquet(None, tmp_path / "t.parquet")
    assert main(["sweep", "llama3-70b-plans", "--parquet", str(tmp_path / "t.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install "clustersim[parquet]"' in err
    assert not (tmp_path / "t.parquet").exists()


def test_missing_dask_names_its_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)
    assert main(["search", "tiny", "-t", "dgx-h100", "--gpus", "8", "--executor", "dask",
                 "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert 'pip install "clustersim[dask]"' in capsys.readouterr().err
