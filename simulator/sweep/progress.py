"""Progress bars for sweeps and searches: tqdm, on stderr, only where someone watches.

A thin adapter over :class:`tqdm.tqdm` with the two things the sweep needs:

* it draws only when its stream is a terminal (or when forced), so logs,
  pipes and tests stay clean (tqdm's ``disable=None`` does the same test);
* items taken from the result store are ``skip``-ped: they advance the count
  but not the rate, so the ETA reflects only simulated work (tqdm's
  ``initial``, which its average rate ``(n - initial) / elapsed`` excludes;
  ``smoothing=0`` makes the rate that average).

The clock is injectable (``clock=``), so the text can be tested without
waiting. A bar that does not draw only counts: tqdm is imported for one that does
(it costs a fresh ``clustersim sweep`` about 10 ms of start-up otherwise).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

FORMAT = "{desc}[{bar:28}] {n_fmt}/{total_fmt} {percentage:3.0f}% {rate_fmt} ETA {remaining}"


class Progress:
    """``label [#######.......] 12/40  30% 5.20it/s ETA 00:05`` via tqdm."""

    def __init__(self, total: int, label: str = "", stream: TextIO | None = None,
                 enabled: bool | None = None, clock: Callable[[], float] = time.monotonic):
        stream = stream if stream is not None else sys.stderr
        isatty = getattr(stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) if enabled is None else enabled
        self._total = total
        self._bar: tqdm | None = None
        if self.enabled:
            from tqdm import tqdm  # only a bar that draws needs it (module docstring)

            self._bar = tqdm(total=total, desc=f"{label} " if label else "", file=stream,
                             smoothing=0, mininterval=0.1, bar_format=FORMAT, ascii=" #",
                             dynamic_ncols=False, leave=True, delay=0)
            self._bar._time = clock  # tqdm reads its clock through this attribute
            self._bar.start_t = self._bar.last_print_t = clock()
        self.done = 0

    @property
    def total(self) -> int:
        return int(self._bar.total or 0) if self._bar is not None else self._total

    @total.setter
    def total(self, value: int) -> None:
        self._total = value
        if self._bar is not None:
            self._bar.total = value

    def skip(self, n: int) -> None:
        """Items finished before we started (taken from the store): counted, not rated."""
        self.done += n
        if self._bar is not None:
            self._bar.initial += n
            self._bar.n += n
            self._bar.refresh()

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def render(self) -> str:
        """The bar's current text (empty when it does not draw)."""
        return str(self._bar) if self._bar is not None else ""

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
