"""nccl-tests / rccl-tests ``*_perf`` stdout: the result table, its collective and its ranks.

Format (NVIDIA/nccl-tests, doc/PERFORMANCE.md and src/common.cu): a ``# nThread ...``
header, one ``#  Rank  r Group g Pid p on HOST device d [bus] NAME`` line per rank (older
versions omit ``Group``), a column header ``size count type redop root time algbw busbw
#wrong time algbw busbw #wrong`` (out-of-place, then in-place; older versions have no
``root`` and say ``error``), then one row per size: bytes, elements, and times in
microseconds. The collective comes from the ``Collective test starting: X_perf`` line, the
command line (``all_reduce_perf``), the file name, or, for all-reduce, from the
busbw / algbw ratio ``2(n-1)/n``. The group's ranks per node come from the hosts of the
rank lines. Several tables in one file (one per ``# nThread`` header) are read in turn.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ConfigError
from .measurements import CollectivePoint

OPS = {"all_reduce": "all_reduce", "reduce_scatter": "reduce_scatter",
       "all_gather": "all_gather", "alltoall": "all_to_all", "sendrecv": "send_recv",
       "broadcast": None, "reduce": None, "gather": None, "scatter": None,
       "hypercube": None}
_OP = re.compile(r"\b(all_reduce|reduce_scatter|all_gather|alltoall|sendrecv|broadcast|"
                 r"reduce|gather|scatter|hypercube)_perf")
_RANK = re.compile(r"^\s*#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+"
                   r"device", re.IGNORECASE)
_ROW = re.compile(r"^\s*(?:\[\d+\]\s*)?(\d+)\s+(\d+)\s+\S+")
REQUIRED = ("size", "time", "algbw", "busbw")


def looks_like(text: str) -> bool:
    """True when the text holds an nccl-tests table header."""
    return bool(re.search(r"^\s*#?\s*size\s+count\b", text, re.M)) or "# nThread" in text


def parse(path: str | Path, text: str) -> list[CollectivePoint]:
    """Every out-of-place row of every table in ``text``; ConfigError naming file:line."""
    name = str(path)
    tables: list[tuple[str | None, dict[int, str], list[str], list[tuple[list[float], str]]]] = []
    op_hint = _name_op(Path(name).name)
    ranks: dict[int, str] = {}
    for i, line in enumerate(text.splitlines(), start=1):
        if (m := _OP.search(line)) is not None:
            op_hint = m.group(1)
        if "nThread" in line:  # a new test: its ranks follow
            ranks = {}
        if (m := _RANK.match(line)) is not None:
            ranks[int(m.group(1))] = m.group(2)
            continue
        toks = line.lstrip("#").split()
        if toks[:2] == ["size", "count"]:
            missing = [c for c in REQUIRED if c not in toks]
            if missing:
                raise ConfigError("columns", " ".join(toks), "an nccl-tests table needs "
                                  f"{', '.join(REQUIRED)}; missing {', '.join(missing)}",
                                  source=f"{name}:{i}")
            tables.append((op_hint, ranks, toks, []))
            continue
        if not tables or line.lstrip().startswith("#") or not _ROW.match(line):
            continue
        tables[-1][3].append((_numbers(line, tables[-1][2], f"{name}:{i}"), f"{name}:{i}"))
    points = [p for table in tables for p in _table(*table)]
    if not points:
        raise ConfigError("nccl-tests table", name, "no result rows found (expected the "
                          "'size count type ... time algbw busbw' table of an *_perf run)",
                          source=f"{name}:1")
    return points


def _numbers(line: str, cols: list[str], where: str) -> list[float]:
    """(size B, out-of-place time us, algbw, busbw) of one row."""
    toks = re.sub(r"^\s*\[\d+\]\s*", "", line).split()
    if len(toks) < cols.index("busbw") + 1:
        raise ConfigError("row", line.strip()[:60], f"has {len(toks)} columns, its table "
                          f"header {len(cols)}", source=where)
    try:
        return [float(toks[0])] + [float(toks[cols.index(c)]) for c in REQUIRED[1:]]
    except ValueError:
        raise ConfigError("row", line.strip()[:60], "size, time, algbw and busbw must be "
                          "numbers", source=where) from None


def _table(op_hint: str | None, ranks: dict[int, str], cols: list[str],
           rows: list[tuple[list[float], str]]) -> list[CollectivePoint]:
    rows = [(r, w) for r, w in rows if r[0] > 0 and r[1] > 0]
    if not rows:
        return []
    where = rows[0][1]
    if not ranks:
        raise ConfigError("ranks", None, "no '#  Rank N Group ... on HOST device' lines "
                          "before the table: cannot tell how many GPUs ran it", source=where)
    n, hosts = len(ranks), len(set(ranks.values()))
    big = max(rows, key=lambda r: r[0][0])[0]
    op = op_hint or _op_from_ratio(big[2], big[3], n)
    if op is None:
        raise ConfigError("collective", None, "cannot tell which collective this table is: "
                          "keep the '*_perf' command line in the file or name the file after "
                          "it (all_gather_perf.txt)", source=where)
    if OPS[op] is None:
        raise ConfigError("collective", f"{op}_perf", "not modelled; supported: all_reduce, "
                          "reduce_scatter, all_gather, alltoall, sendrecv", source=where)
    return [CollectivePoint(op=OPS[op], nbytes=r[0], ranks=n, local=max(1, n // hosts),
                            seconds=r[1] * 1e-6, busbw_GBps=r[3], where=w) for r, w in rows]


def _name_op(filename: str) -> str | None:
    m = re.search(r"(all_reduce|reduce_scatter|all_gather|alltoall|sendrecv)", filename)
    return m.group(1) if m else None


def _op_from_ratio(algbw: float, busbw: float, n: int) -> str | None:
    """all_reduce when busbw / algbw is 2(n-1)/n (nccl-tests PERFORMANCE.md); else unknown."""
    if algbw <= 0.05 or n < 2:
        return None
    return "all_reduce" if abs(busbw / algbw - 2 * (n - 1) / n) < 0.05 else None
