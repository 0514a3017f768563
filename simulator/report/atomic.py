"""Atomic file output: write a temporary file beside the target, then rename it over.

:func:`os.replace` is atomic on POSIX when source and target are on the same
file system, which a temporary file in the target's own directory guarantees.
A reader therefore sees the old file or the new one, never a half-written one,
and a crash leaves no partial output behind (the temporary file is removed).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def atomic_write(path: str | Path, write: Callable[[IO[Any]], None], binary: bool = True
                 ) -> Path:
    """Call ``write(fh)`` on a temporary file, then move it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as fh:
            write(fh)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; use the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
