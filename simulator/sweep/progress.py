"""A one-line progress bar with rate and ETA, for sweeps and searches, on stderr.

It draws only when its stream is a terminal (or when forced), so logs, pipes
and tests stay clean. The rate counts the items done since the bar started
(items already in the result store are ``skip``-ped, not counted in the rate),
and the ETA is the remaining items over that rate. Redraws are throttled to
ten a second; the clock is injectable so the format can be tested without
waiting.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

WIDTH = 28


def _clock_text(seconds: float) -> str:
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """``label [#######.......]  12/40  30%  5.2/s  ETA 0:05``."""

    def __init__(self, total: int, label: str = "", stream: TextIO | None = None,
                 enabled: bool | None = None, clock: Callable[[], float] = time.monotonic):
        self.total, self.label = total, label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) if enabled is None else enabled
        self.clock = clock
        self.start = clock()
        self.done = 0
        self.skipped = 0
        self._drawn = -1.0
        self._drawn_done = -1

    def skip(self, n: int) -> None:
        """Items finished before we started (taken from the store)."""
        self.done += n
        self.skipped += n
        self._draw(force=True)

    def update(self, n: int = 1) -> None:
        self.done += n
        self._draw(force=self.done >= self.total)

    def render(self) -> str:
        total = max(self.total, 1)
        frac = min(1.0, self.done / total)
        bar = "#" * int(frac * WIDTH)
        elapsed = self.clock() - self.start
        worked = self.done - self.skipped
        rate = worked / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = _clock_text(left / rate) if rate > 0 else "?"
        if left <= 0:
            eta = _clock_text(elapsed)
        head = f"{self.label} " if self.label else ""
        return (f"{head}[{bar:<{WIDTH}}] {self.done}/{self.total} {frac * 100:3.0f}% "
                f"{rate:.1f}/s {'took' if left <= 0 else 'ETA'} {eta}")

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if not force and now - self._drawn < 0.1:
            return
        self._drawn, self._drawn_done = now, self.done
        self.stream.write("\r" + self.render() + "\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._drawn >= 0:
            if self._drawn_done != self.done:
                self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
