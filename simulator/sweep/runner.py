"""Run a sweep: resolve every point, reuse stored outcomes, simulate the rest, build the table.

The table has one row per point, in ``config_id`` order, whatever order the
workers finished in. Columns, in order:

* ``config_id``, ``status`` (``ok`` / ``invalid`` / ``error``), ``reason``
  (the ConfigError message of an invalid point) and ``config_key`` (the
  configuration hash that keys the store);
* the inputs: every resolved workload field as a dotted key (``model.*``,
  ``parallelism.*``, ``training.*``), then every topology field
  (``topology.*``, without citations);
* the outputs: the flattened :class:`~simulator.metrics.Result`, the same keys
  as ``Result.to_series()`` (``step_time_s``, ``breakdown_s.bubble``, ...).

An invalid row keeps its inputs as far as they could be read, plus
``workload``, ``topology`` and ``num_gpus`` where known; its other outputs
are empty.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..io import atomic_path, atomic_write
from ..optional import require
from .executors import Executor
from .progress import Progress
from .resolve import Documents, Resolved, resolve_point
from .spec import Point
from .store import ResultStore
from .table import Table
from .tasks import simulate_task

if TYPE_CHECKING:
    import pandas as pd

META = ("config_id", "status", "reason", "config_key")


@dataclass
class SweepCounts:
    """What a sweep did: rows, distinct valid configurations, and where each came from."""

    configurations: int = 0
    distinct: int = 0
    from_store: int = 0
    simulated: int = 0
    invalid: int = 0
    errors: int = 0

    def line(self) -> str:
        return (f"{self.configurations} configurations ({self.distinct} distinct valid): "
                f"{self.from_store} from store, {self.simulated} simulated, "
                f"{self.invalid} invalid, {self.errors} errors")


def simulate_keys(items: dict[str, Any], executor: Executor, store: ResultStore | None,
                  progress: Progress | None) -> tuple[dict[str, str], int]:
    """Outcome JSON of every key in ``items`` (key -> (workload, topology)).

    Stored outcomes are reused; the rest are simulated and appended to the
    store one by one as they arrive. Returns the outcomes and how many came
    from the store.
    """
    keys = list(items)
    outcomes = store.get_many(keys) if store is not None else {}
    reused = len(outcomes)
    pending = [k for k in keys if k not in outcomes]
    if progress is not None:
        progress.skip(reused)
    for i, text in executor.map(simulate_task, [items[k] for k in pending]):
        key = pending[i]
        outcomes[key] = text
        if store is not None:
            status = json.loads(text)["status"]
            if status != "error":
                store.put(key, status, text)
        if progress is not None:
            progress.update()
    return outcomes, reused


def run_table(points: list[Point], executor: Executor, store: ResultStore | None = None,
              progress: Progress | None = None, docs: Documents | None = None,
              time_to_train: dict[str, Any] | None = None) -> Table:
    """The sweep table of ``points`` as plain rows (see the module docstring).

    ``time_to_train`` (checked options) adds the time-to-train columns; it enters the
    store key, so stored rows without them are never mistaken for rows with them."""
    docs = docs or Documents()
    resolved = [_with_metrics(resolve_point(p, docs), time_to_train) for p in points]
    items = {r.key: (r.workload, r.topology, time_to_train) for r in resolved if r.valid}
    if progress is not None:
        progress.total = len(items)
    outcomes, reused = simulate_keys(items, executor, store, progress)
    rows = [_row(r, outcomes) for r in resolved]
    counts = SweepCounts(configurations=len(rows), distinct=len(items), from_store=reused,
                         simulated=len(items) - reused,
                         invalid=sum(r["status"] == "invalid" for r in rows),
                         errors=sum(r["status"] == "error" for r in rows))
    return Table(rows, _columns(resolved, rows), asdict(counts))


def _with_metrics(r: Resolved, options: dict[str, Any] | None) -> Resolved:
    if options is None or not r.valid:
        return r
    text = r.key + json.dumps(options, sort_keys=True)
    return replace(r, key=hashlib.sha256(text.encode()).hexdigest())


def _row(r: Resolved, outcomes: dict[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {"config_id": r.point.index, "status": "invalid",
                           "reason": r.reason, "config_key": r.key, **r.inputs}
    if r.valid:
        out = json.loads(outcomes[r.key])
        row["status"], row["reason"] = out.pop("status"), out.pop("reason")
        row.update(out)
    else:
        row.update(_known_outputs(r))
    return row


def _known_outputs(r: Resolved) -> dict[str, Any]:
    """``workload``, ``topology`` and ``num_gpus`` of an invalid row, where known."""
    out: dict[str, Any] = {}
    if isinstance(r.inputs.get("model.name"), str):
        out["workload"] = r.inputs["model.name"]
    if isinstance(r.inputs.get("topology.name"), str):
        out["topology"] = r.inputs["topology.name"]
    degrees = [r.inputs.get(f"parallelism.{k}", 1) for k in
               ("tensor", "pipeline", "data", "context")]
    if r.point.num_gpus is not None:
        out["num_gpus"] = r.point.num_gpus
    elif all(isinstance(d, int) and not isinstance(d, bool) for d in degrees):
        out["num_gpus"] = degrees[0] * degrees[1] * degrees[2] * degrees[3]
    return out


def _columns(resolved: list[Resolved], rows: list[dict[str, Any]]) -> list[str]:
    """Meta, then inputs, then outputs, each in order of first appearance."""
    inputs = dict.fromkeys(k for r in resolved for k in r.inputs)
    outputs = dict.fromkeys(k for row in rows for k in row
                            if k not in inputs and k not in META)
    return [*META, *inputs, *outputs]


def _atomic(path: str | Path, write: Any) -> None:
    with atomic_path(path) as tmp:
        write(tmp)


def write_csv(frame: pd.DataFrame | Table, path: str | Path) -> None:
    """Write the table (a frame, or the plain :class:`Table`, which needs no pandas) as
    CSV, atomically (temp file + rename)."""
    if isinstance(frame, Table):
        atomic_write(path, frame.write_csv, binary=False)
    else:
        _atomic(path, lambda tmp: frame.to_csv(tmp, index=False))


def write_parquet(frame: pd.DataFrame, path: str | Path) -> None:
    """Write the table as Parquet, atomically; mixed-type columns become text."""
    require("pyarrow", "--parquet")  # an extra: clustersim[parquet]
    safe = frame.copy()
    for col in safe.columns:
        if safe[col].dtype == object:
            kinds = {type(v) for v in safe[col] if v is not None and v == v}
            if len(kinds) > 1:
                safe[col] = [None if v is None or v != v else str(v) for v in safe[col]]
    _atomic(path, lambda tmp: safe.to_parquet(tmp, index=False))
