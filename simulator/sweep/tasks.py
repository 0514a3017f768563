"""Work units that executors run on worker processes.

Each takes picklable arguments and returns plain JSON text. What comes back is
therefore the same bytes whichever executor ran it (in-process, local
processes, Dask), and what the result store keeps is exactly what a fresh run
returns: floats survive the trip unchanged because JSON writes them with
Python's shortest round-tripping ``repr``.

Outcome statuses: ``ok`` (the flattened :meth:`Result.to_dict`), ``over_memory`` (the
same, for a plan whose worst stage plus ``training.memory_headroom_GB`` exceeds the GPU's
capacity: it was simulated, but it would not run), ``invalid``
(a ConfigError raised while simulating; its message is the reason) and
``error`` (any other exception: a simulator bug, reported but never stored,
so a rerun after the fix recomputes it).
"""

from __future__ import annotations

import json
from typing import Any

from ..api import simulate_resolved
from ..config import TopologyConfig, Workload
from ..errors import ConfigError
from ..metrics.result import flatten
from ..reliability.sweep_metrics import metrics as ttt_metrics


def dump(outcome: dict[str, Any]) -> str:
    """Canonical JSON text of an outcome (numpy scalars become Python numbers)."""
    return json.dumps(outcome, default=_plain)


def _plain(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def simulate_task(item: tuple[Workload, TopologyConfig] | tuple[Workload, TopologyConfig, Any]
                  ) -> str:
    """Simulate one resolved configuration; returns the outcome as JSON text.

    A third item, time-to-train options, adds the ``time_to_train.*`` metrics
    (:mod:`simulator.reliability.sweep_metrics`)."""
    w, t, *extra = item
    options = extra[0] if extra else None
    try:
        result, _, _ = simulate_resolved(w, t)
        more = ttt_metrics(w, t, options) if options else {}
    except ConfigError as exc:
        return dump({"status": "invalid", "reason": exc.message()})
    except Exception as exc:  # a simulator bug: reported in the row, never stored
        return dump({"status": "error", "reason": f"{type(exc).__name__}: {exc}"})
    if not result.fits_in_memory:
        reason = next((n for n in result.notes if n.startswith("does not fit")), "over memory")
        return dump({"status": "over_memory", "reason": reason, **flatten(result.to_dict()),
                     **more})
    return dump({"status": "ok", "reason": None, **flatten(result.to_dict()), **more})


def run_chunk(fn: Any, chunk: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """Apply ``fn`` to each ``(index, item)``; executors ship work in such chunks."""
    return [(i, fn(item)) for i, item in chunk]
