"""Nothing left behind: stale temporaries, orphaned sweep workers, private file modes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.io import atomic_write_text
from simulator.validation.report import write_atomic

ROOT = Path(__file__).resolve().parents[1]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has this PID now (barring reuse within ms)


def test_next_write_removes_temporaries_of_killed_writers_only(tmp_path):
    target = tmp_path / "r.json"
    stale = tmp_path / f".r.json.{_dead_pid()}.abc123.tmp.json"
    live = tmp_path / f".r.json.{os.getpid()}.def456.tmp.json"
    other = tmp_path / f".q.json.{_dead_pid()}.abc123.tmp.json"  # another target's
    for p in (stale, live, other):
        p.write_text("half")
    atomic_write_text(target, "{}\n")
    assert target.read_text() == "{}\n"
    assert not stale.exists() and live.exists() and other.exists()


def test_validation_report_gets_normal_permissions(tmp_path):
    out = tmp_path / "sub" / "v.md"
    write_atomic(out, "# report\n")
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")  # an unreaped zombie has exited


SCRIPT = """
import time
from simulator.sweep.executors import LocalExecutor
pool = LocalExecutor(2)._get_pool()
futures = [pool.submit(time.sleep, 120) for _ in range(2)]
while len(pool._processes) < 2:
    time.sleep(0.05)
print(" ".join(map(str, pool._processes)), flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sweep_workers_exit_when_their_parent_is_killed():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                              text=True, env=env)
    workers: list[int] = []
    try:
        workers = [int(p) for p in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(_running(p) for p in workers)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30  # a bound on waiting, not a timing assertion
        while any(_running(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_running(p) for p in workers)
    finally:
        parent.kill()
        for p in workers:
            if _running(p):
                os.kill(p, signal.SIGKILL)


WATCHER = """
import sys, time
from simulator.sweep.executors import watch_parent
watch_parent(int(sys.argv[1]), period=0.05)
print("watching", flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_worker_whose_creator_died_before_it_started_exits():
    # The race a SIGKILL can win: the pool's creator is gone before the worker's initializer
    # runs. The initializer is handed the creator's PID, so it does not adopt the reaper as
    # the parent to watch; it exits at once.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", WATCHER, str(_dead_pid())], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "watching" not in proc.stdout


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_worker_of_another_parent_exits_when_its_creator_does():
    # A forkserver's worker: its parent is the server, its creator another process.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    creator = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    worker = subprocess.Popen([sys.executable, "-c", WATCHER, str(creator.pid)], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "watching"
        creator.kill()
        creator.wait()
        assert worker.wait(timeout=60) == 1  # a bound on waiting, not a timing assertion
    finally:
        creator.kill()
        worker.kill()
