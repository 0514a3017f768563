"""A result store that loses nothing: SQLite, one row per configuration key.

Outcomes are appended as they arrive, one transaction per row, keyed by the
configuration's sha256 (:func:`simulator.sweep.resolve.config_key`) with
``INSERT OR IGNORE``, so a key is stored at most once. SQLite's atomic commit
means a process killed at any instant leaves every committed row intact and
never a half-written one; in WAL mode with ``synchronous=NORMAL`` a commit
survives the death of the process (only a power cut may roll back the last
few, which a rerun then recomputes). A sweep started again reads the keys
already present and computes only the rest, so it writes no duplicates and
repeats no work.

The store knows nothing of sweeps: several sweeps (and plan searches) can
share one, and a configuration simulated by any of them is reused by all.
Its keys include the simulator version; results from a changed simulator
under the same version are not detected, so use a fresh store after editing
the model.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

FILENAME = "results.sqlite"
_SCHEMA = ("CREATE TABLE IF NOT EXISTS outcomes ("
           "key TEXT PRIMARY KEY, status TEXT NOT NULL, outcome TEXT NOT NULL)")


def store_file(path: str | Path) -> Path:
    """``DIR`` -> ``DIR/results.sqlite``; a path ending in ``.sqlite``/``.db`` is used as is."""
    path = Path(path)
    return path if path.suffix in (".sqlite", ".db") else path / FILENAME


class ResultStore:
    """Outcome JSON texts keyed by configuration hash."""

    def __init__(self, path: str | Path):
        self.file = store_file(path)
        self.file.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: autocommit, so each INSERT is its own transaction.
        self._db = sqlite3.connect(self.file, timeout=60.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        """Stored outcomes of those ``keys`` that are present."""
        keys = list(keys)
        found: dict[str, str] = {}
        for i in range(0, len(keys), 500):
            batch = keys[i:i + 500]
            marks = ",".join("?" * len(batch))
            rows = self._db.execute(
                f"SELECT key, outcome FROM outcomes WHERE key IN ({marks})", batch)
            found.update(rows.fetchall())
        return found

    def put(self, key: str, status: str, outcome: str) -> None:
        """Append one outcome in its own transaction; an existing key is left as it is."""
        self._db.execute("INSERT OR IGNORE INTO outcomes (key, status, outcome) "
                         "VALUES (?, ?, ?)", (key, status, outcome))

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
