"""Executors give identical tables; a sweep killed mid-way resumes without loss or duplicates."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pandas as pd
import pytest

from simulator.cli.main import main
from simulator.sweep import sweep
from simulator.sweep.store import store_file
from tests.conftest import ROOT

AXES = {"parallelism.tensor": [1, 2, 4], "parallelism.pipeline": [1, 2],
        "training.micro_batch_size": [1, 2, 3], "num_gpus": [16]}


def test_local_processes_and_dask_match_serial_bit_for_bit():
    from distributed import LocalCluster

    serial = sweep("tiny", "dgx-h100", axes=AXES, executor="serial")
    assert (serial.status == "invalid").any() and (serial.status == "ok").sum() >= 8
    local = sweep("tiny", "dgx-h100", axes=AXES, executor="local", workers=2)
    pd.testing.assert_frame_equal(local, serial)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://",
                      host="127.0.0.1", dashboard_address=None) as cluster:
        dask = sweep("tiny", "dgx-h100", axes=AXES, executor="dask",
                     scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(dask, serial)


def _stored(path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0]
    except sqlite3.OperationalError:  # table not created yet
        return 0


SPEC = """workload: llama3-8b
topology: dgx-h100
set: {training.global_batch_size: 256}
axes:
  parallelism.tensor: [1, 2, 4, 8]
  parallelism.pipeline: [1, 2, 4, 8]
  training.micro_batch_size: [1, 2]
  num_gpus: [64]
"""
N = 32


def test_killed_sweep_resumes_with_one_row_per_configuration(tmp_path, capsys):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(SPEC)
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "simulator.cli.main", "sweep", str(spec), "--store",
           str(store), "--workers", "1", "-o", str(tmp_path / "never.csv")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        while _stored(store_file(store)) < 1:
            if proc.poll() is not None:
                pytest.fail(f"sweep ended before it was killed: {proc.stderr.read().decode()}")
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    killed_at = _stored(store_file(store))
    assert 1 <= killed_at < N
    assert not (tmp_path / "never.csv").exists()

    resumed = tmp_path / "resumed.csv"
    assert main(["sweep", str(spec), "--store", str(store), "--workers", "1",
                 "-o", str(resumed)]) == 0
    err = capsys.readouterr().err
    assert f"{killed_at} from store, {N - killed_at} simulated" in err
    assert _stored(store_file(store)) == N  # one row per configuration, no duplicates
    with sqlite3.connect(store_file(store)) as db:
        keys = [k for (k,) in db.execute("SELECT key FROM outcomes")]
    assert len(set(keys)) == N

    fresh = tmp_path / "fresh.csv"
    assert main(["sweep", str(spec), "--workers", "1", "-o", str(fresh)]) == 0
    assert resumed.read_bytes() == fresh.read_bytes()
    table = pd.read_csv(resumed)
    # plans over the GPU's memory are simulated too, with their own status
    assert len(table) == N and table.config_key.is_unique
    assert table.status.isin(["ok", "over_memory"]).all() and (table.status == "ok").any()


def test_local_processes_start_safely_beside_other_threads():
    """With another thread alive, workers come from a forkserver, never a bare fork."""
    import threading

    from simulator.sweep.executors import _context

    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert _context().get_start_method() == "forkserver"
        local = sweep("tiny", "dgx-h100", axes={"parallelism.tensor": [1, 2, 4]},
                      executor="local", workers=2)
    finally:
        release.set()
        other.join()
    serial = sweep("tiny", "dgx-h100", axes={"parallelism.tensor": [1, 2, 4]},
                   executor="serial")
    pd.testing.assert_frame_equal(local, serial)
