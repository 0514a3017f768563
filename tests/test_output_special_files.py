"""``-o`` to a device, a FIFO or a symlink: written through, never replaced (issue 33.1)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading

import pytest

from simulator import ConfigError
from simulator.io import atomic_write_text


def _cli(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "simulator", *argv], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


def test_fake_null_device_stays_a_device(tmp_path):
    dev = tmp_path / "fake"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"mknod not permitted: {exc}")
    r = _cli("run", "tiny", "-t", "dgx-h100", "-o", str(dev))
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(dev.lstat().st_mode) and dev.lstat().st_rdev == os.makedev(1, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["fake"]  # no temporary left behind


def test_full_device_is_a_one_line_error(tmp_path):
    dev = tmp_path / "full"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"mknod not permitted: {exc}")
    with pytest.raises(ConfigError, match="cannot be written"):
        atomic_write_text(dev, "x" * 10)
    assert stat.S_ISCHR(dev.lstat().st_mode)


def test_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    atomic_write_text(fifo, '{"a": 1}\n')
    reader.join(timeout=30)
    assert got == [b'{"a": 1}\n']
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_symlink_is_followed_and_kept(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new" and real.stat().st_mode & 0o777 == 0o640


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "made.csv")
    atomic_write_text(link, "a\n")
    assert link.is_symlink() and (tmp_path / "made.csv").read_text() == "a\n"


def test_symlink_to_a_directory_is_refused(tmp_path):
    link = tmp_path / "d"
    link.symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="is a directory"):
        atomic_write_text(link, "x")
    assert link.is_symlink()
