"""Atomic file output: a reader sees the old file or the new one, never half of one.

Every output (JSON, CSV, Parquet, figures, traces) is written to a temporary
file in the *same directory* as the target, flushed to disk, and then moved
over the target with :func:`os.replace`. On POSIX that is a ``rename(2)``,
which atomically swaps the directory entry (same file system, hence the same
directory); on Windows ``MoveFileEx`` with replace semantics. So:

* an exception while writing removes the temporary file and leaves the
  target untouched (or absent, if it did not exist);
* a crash or ``SIGKILL`` while writing leaves the target untouched; a stray
  ``.NAME.PID.*.tmp.EXT`` file stays behind next to it until the next write to
  the same target, which removes every such temporary whose writing process
  (``PID``) is gone, or that is older than a day (a writer on another host
  sharing the folder);
* a power loss after :func:`atomic_path` returns keeps the new content
  (the file and then its directory are fsync'ed).

The temporary name keeps the target's suffix, so writers that infer the format
from the extension (``matplotlib.savefig``, ``pandas.to_parquet``) work on it:

A target that is not a regular file is never replaced: a symbolic link is followed
(its final target is written atomically, the link stays a link) and a special file (a
character or block device such as ``/dev/null``, a FIFO) is written in place, as the
shell's ``>`` does, from a temporary in the system's temporary folder once the writer
has finished; a socket or another kind is refused.

>>> with atomic_path("fig.png") as tmp:      # doctest: +SKIP
...     figure.savefig(tmp)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from .errors import ConfigError


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()  # what open() would give a new file; read once, at import


def _fsync(path: str | Path, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # e.g. directories cannot be opened on Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


STALE_AFTER_S = 86_400.0  # a temporary this old is stale whatever its PID says


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (signal 0 checks without sending)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):  # exists, owned by someone else
        return True
    return True


def clean_stale_temporaries(target: Path) -> list[Path]:
    """Remove temporaries of ``target`` left by killed writers; returns what was removed.

    A temporary is ``.NAME.PID.RANDOM.tmpSUFFIX`` in the target's folder; it is
    stale when process PID no longer exists, or it is older than STALE_AFTER_S.
    A live writer's temporary is left alone, so two writers never race.
    """
    removed: list[Path] = []
    head, tail = f".{target.name}.", f".tmp{target.suffix}"
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        name = entry.name
        if not (name.startswith(head) and name.endswith(tail)):
            continue
        pid_text = name[len(head):-len(tail)].split(".", 1)[0]
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER_S
        except OSError:
            continue
        dead = pid_text.isdigit() and not _alive(int(pid_text))
        if dead or old:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _resolve(target: Path) -> tuple[Path, int | None]:
    """The path to write (a symlink's final target) and its file type (None: absent)."""
    try:
        if target.is_symlink():
            target = Path(os.path.realpath(target))
        is_dir = target.is_dir()
        mode = target.stat().st_mode if target.exists() else None
    except (OSError, ValueError) as exc:  # a name too long or too deep, a NUL byte, a loop
        raise ConfigError("output", str(target), f"is not a usable path: {exc}") from None
    if is_dir:
        raise ConfigError("output", str(target), "is a directory; give a file name")
    return target, None if mode is None else stat.S_IFMT(mode)


@contextlib.contextmanager
def _special_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path; on success copy it into the special file ``target``
    (opened for writing without being replaced, as ``>`` does)."""
    fd, tmp = tempfile.mkstemp(prefix="clustersim.", suffix=f".tmp{target.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        try:
            with open(tmp, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except OSError as exc:  # /dev/full: ENOSPC; a device that refuses writes
            raise ConfigError("output", str(target),
                              f"cannot be written: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success move it over ``path``.

    Raises :class:`ConfigError` (field ``output``) when the directory does not
    exist or cannot be written, ``path`` is a directory or a socket. An exception
    inside the block removes the temporary file and propagates unchanged. A symlink
    is followed; a device or FIFO is written in place (module docstring).
    """
    target, kind = _resolve(Path(path))
    if kind in (stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO):
        with _special_path(target) as tmp:
            yield tmp
        return
    if kind not in (None, stat.S_IFREG):
        raise ConfigError("output", str(target), "is not a regular file, device or FIFO "
                          "(a socket?); give a file name")
    clean_stale_temporaries(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.",
                                   suffix=f".tmp{target.suffix}", dir=target.parent)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError("output", str(target),
                          f"cannot be written: {reason} ({target.parent})") from None
    os.close(fd)
    try:
        existing = target.stat().st_mode & 0o7777 if kind is not None else _MODE
        os.chmod(tmp, existing)
        yield Path(tmp)
        _fsync(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync(target.parent, directory=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (no newline translation)."""
    atomic_write_bytes(path, text.encode(encoding))


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[Any]], None],
                 binary: bool = True) -> Path:
    """Call ``write(fh)`` on a temporary file opened next to ``path``, then move it over."""
    with atomic_path(path) as tmp, open(tmp, "wb" if binary else "w",
                                        encoding=None if binary else "utf-8") as fh:
        write(fh)
    return Path(path)
