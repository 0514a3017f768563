"""Recorded router loads (``router_load: trace``).

CSV format
----------
A header row, then one row per expert (and optionally per layer)::

    layer,expert,tokens
    0,0,5123
    0,1,4870
    ...

* ``expert`` (0-based, below ``num_experts``) and ``tokens`` (non-negative
  integer: assignments that expert received over the recorded window) are
  required; ``layer`` is optional. Experts missing from a layer count as 0.
* Without ``layer`` the file is one load vector. With it, each layer is one
  vector, and :func:`simulator.moe.route` replays a layer chosen with the
  caller's generator, so micro-batches see the spread of recorded skews.
* Counts are rescaled to the simulated ``tokens * top_k`` by largest-remainder
  rounding; only their proportions matter.

Any problem raises a :class:`~simulator.errors.ConfigError` naming the file
and the row.
"""

from __future__ import annotations

import csv
import functools
import os

import numpy as np

from ..errors import ConfigError

FIELD = "model.moe.router_trace"


def load_trace(path: str, num_experts: int) -> np.ndarray:
    """Per-layer expert loads from a CSV: int64 ``[layers, num_experts]``."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError as exc:
        raise ConfigError(FIELD, path, f"cannot be read: {exc.strerror}") from None
    return _load(path, mtime, int(num_experts)).copy()


@functools.lru_cache(maxsize=32)
def _load(path: str, _mtime: int, num_experts: int) -> np.ndarray:
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(FIELD, path, f"cannot be read as CSV: {exc}") from None
    if not rows:
        raise ConfigError(FIELD, path, "has no data rows (expected header 'layer,expert,tokens')")
    missing = {"expert", "tokens"} - set(rows[0])
    if missing:
        raise ConfigError(FIELD, path, f"lacks column(s) {', '.join(sorted(missing))}; "
                          f"expected header 'layer,expert,tokens' or 'expert,tokens'")
    has_layer = "layer" in rows[0]
    parsed = [_parse_row(r, i + 2, path, has_layer, num_experts) for i, r in enumerate(rows)]
    layers = sorted({p[0] for p in parsed})
    index = {layer: j for j, layer in enumerate(layers)}
    out = np.zeros((len(layers), num_experts), dtype=np.int64)
    seen: set[tuple[int, int]] = set()
    for (layer, expert, tokens), line in zip(parsed, range(2, len(parsed) + 2), strict=True):
        if (layer, expert) in seen:
            raise ConfigError(FIELD, path, f"line {line}: expert {expert} appears twice"
                              + (f" in layer {layer}" if has_layer else ""))
        seen.add((layer, expert))
        out[index[layer], expert] = tokens
    empty = np.flatnonzero(out.sum(axis=1) == 0)
    if empty.size:
        raise ConfigError(FIELD, path, f"layer {layers[empty[0]]} has no tokens at all")
    return out


def _parse_row(row: dict, line: int, path: str, has_layer: bool,
               num_experts: int) -> tuple[int, int, int]:
    vals = []
    for col in ("layer", "expert", "tokens") if has_layer else ("expert", "tokens"):
        raw = (row.get(col) or "").strip()
        try:
            vals.append(int(raw))
        except ValueError:
            raise ConfigError(FIELD, path, f"line {line}: {col} = {raw!r} is not an "
                              "integer") from None
        if vals[-1] < 0:
            raise ConfigError(FIELD, path, f"line {line}: {col} = {raw} is negative")
    layer, expert, tokens = vals if has_layer else [0, *vals]
    if expert >= num_experts:
        raise ConfigError(FIELD, path, f"line {line}: expert {expert} is not below "
                          f"num_experts ({num_experts})")
    return layer, expert, tokens
