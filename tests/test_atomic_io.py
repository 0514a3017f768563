"""Atomic writers: an interrupted write leaves the old file or the new one, never a torn one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from simulator import ConfigError
from simulator.io import atomic_path, atomic_write_bytes, atomic_write_text


def _stray(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if ".tmp" in p.name]


def test_text_and_bytes_round_trip_and_replace(tmp_path):
    path = tmp_path / "r.json"
    atomic_write_text(path, '{"a": 1}\n')
    assert path.read_text() == '{"a": 1}\n'
    atomic_write_bytes(path, b"\x00\x01new")
    assert path.read_bytes() == b"\x00\x01new"
    assert _stray(tmp_path) == []


def test_new_file_gets_umask_mode_and_existing_file_keeps_its_mode(tmp_path):
    fresh = tmp_path / "fresh.csv"
    atomic_write_text(fresh, "x\n")
    mask = os.umask(0)
    os.umask(mask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~mask
    kept = tmp_path / "kept.csv"
    kept.write_text("old")
    kept.chmod(0o640)
    atomic_write_text(kept, "new")
    assert kept.stat().st_mode & 0o777 == 0o640 and kept.read_text() == "new"


def test_temp_path_keeps_suffix_and_directory(tmp_path):
    with atomic_path(tmp_path / "fig.png") as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png"
        tmp.write_bytes(b"png")
    assert (tmp_path / "fig.png").read_bytes() == b"png"


def test_exception_inside_context_keeps_old_file_and_removes_temp(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("old complete content\n")
    with pytest.raises(RuntimeError, match="disk on fire"), atomic_path(path) as tmp:
        tmp.write_text("half of the new con")
        raise RuntimeError("disk on fire")
    assert path.read_text() == "old complete content\n"
    assert _stray(tmp_path) == []


def test_exception_with_no_previous_file_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "new.parquet") as tmp:
        tmp.write_bytes(b"PAR1")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_unwritable_targets_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot be written"):
        atomic_write_text(tmp_path / "no-such-dir" / "x.json", "{}")
    with pytest.raises(ConfigError, match="is a directory"):
        atomic_write_text(tmp_path, "{}")


WRITER = textwrap.dedent("""
    import sys
    from simulator.io import atomic_path
    path, chunk, chunks = sys.argv[1], 1 << 18, 64
    version = 0
    while True:
        version = version % 250 + 1
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            for _ in range(chunks):  # 16 MiB in 64 writes: a kill lands mid-file
                fh.write(bytes([version]) * chunk)
        print(version, flush=True)
""")
SIZE = 64 * (1 << 18)


def _assert_whole(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) == SIZE, f"torn file: {len(data)} of {SIZE} bytes"
    assert data.count(data[:1]) == SIZE, "file mixes two versions"


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.13])
def test_sigkill_while_writing_leaves_a_whole_file(tmp_path, delay):
    path = tmp_path / "trace.json"
    path.write_bytes(b"\xff" * SIZE)  # the "old" complete file
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                            cwd=Path(__file__).resolve().parents[1])
    try:
        assert proc.stdout.readline().strip() == b"1"  # one full version was written
        time.sleep(delay)  # then kill at some point of a later write
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
    _assert_whole(path)
    assert path.read_bytes()[0] != 0xFF  # and the replacement did happen
