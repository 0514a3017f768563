"""Kernel-timings CSV: GEMM rows (m, n, k, dtype, time) and attention rows (batch, heads, seq,
head_dim, causal, kernel, time), the format ``clustersim bench-kernels`` writes.

One file may hold both kinds: a ``op`` column (``gemm`` / ``attention``) says which, and each
kind reads only its own columns; a file without ``op`` is all GEMM (it has m, n, k) or all
attention (it has seq, heads). ``time`` is seconds per call; ``time_us`` / ``time_ms`` are
accepted and converted. ``dtype``: bf16, fp16, fp8 (fp32 rows are skipped: the cost model
has no FP32 GEMM path). ``kernel``: fwd, bwd or fwd_bwd.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..errors import ConfigError
from .measurements import ATTENTION_PASSES, AttentionPoint, GemmPoint

GEMM_COLUMNS = ("m", "n", "k", "dtype")
ATTENTION_COLUMNS = ("batch", "heads", "seq", "head_dim", "causal", "kernel")
# the header bench-kernels writes (tests/test_calibrate_kernels.py checks both agree)
HEADER = ("op", "m", "n", "k", "dtype", "batch", "heads", "seq", "head_dim", "causal",
          "kernel", "time", "device")
TIME_UNITS = {"time": 1.0, "time_s": 1.0, "time_ms": 1e-3, "time_us": 1e-6}
DTYPES = ("bf16", "fp16", "fp8")


def looks_like(text: str) -> bool:
    """True when the first non-comment line is a CSV header naming GEMM or attention columns."""
    head = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")), "")
    cols = {c.strip().lower() for c in head.split(",")}
    return len(cols) > 3 and (set(GEMM_COLUMNS[:3]) <= cols or {"seq", "heads"} <= cols)


def parse(path: str | Path, text: str) -> tuple[list[GemmPoint], list[AttentionPoint]]:
    name = str(path)
    lines = [ln for ln in text.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.strip() and not ln.startswith("#"))
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    cols = [c.strip().lower() for c in reader.fieldnames or []]
    reader.fieldnames = cols
    unit = next((TIME_UNITS[c] for c in cols if c in TIME_UNITS), None)
    tcol = next((c for c in cols if c in TIME_UNITS), None)
    if unit is None:
        raise ConfigError("columns", ",".join(cols), "a kernel-timings CSV needs a time "
                          "column (time [s], time_ms or time_us)", source=f"{name}:{start + 1}")
    gemms, attn = [], []
    for j, row in enumerate(reader, start=start + 2):
        row = {k: (v or "").strip() for k, v in row.items() if k}
        where = f"{name}:{j}"
        kind = row.get("op") or ("gemm" if "m" in cols else "attention")
        needed = GEMM_COLUMNS if kind == "gemm" else ATTENTION_COLUMNS
        missing = [c for c in needed if c not in cols]
        if kind not in ("gemm", "attention"):
            raise ConfigError("op", kind, "must be gemm or attention", source=where)
        if missing:
            raise ConfigError("columns", ",".join(cols), f"{kind} rows need "
                              f"{', '.join(needed)} and a time; missing {', '.join(missing)}",
                              source=f"{name}:{start + 1}")
        seconds = _number(row, tcol, where) * unit
        if seconds <= 0:
            raise ConfigError(tcol, row[tcol], "must be > 0", source=where)
        if kind == "gemm":
            if row["dtype"].lower() == "fp32":
                continue
            gemms.append(_gemm(row, seconds, where))
        else:
            attn.append(_attention(row, seconds, where))
    if not gemms and not attn:
        raise ConfigError("kernel timings", name, "no GEMM or attention rows",
                          source=f"{name}:{start + 1}")
    return gemms, attn


def _number(row: dict, col: str, where: str) -> float:
    try:
        x = float(row[col])
    except (ValueError, KeyError):
        raise ConfigError(col, row.get(col), "must be a number", source=where) from None
    if not x == x or x in (float("inf"), float("-inf")):
        raise ConfigError(col, row[col], "must be finite", source=where)
    return x


def _gemm(row: dict, seconds: float, where: str) -> GemmPoint:
    dtype = row["dtype"].lower()
    if dtype not in DTYPES:
        raise ConfigError("dtype", dtype, f"must be one of {', '.join(DTYPES)} (or fp32, "
                          "skipped)", source=where)
    m, n, k = (_number(row, c, where) for c in ("m", "n", "k"))
    if min(m, n, k) <= 0:
        raise ConfigError("m,n,k", (m, n, k), "must be > 0", source=where)
    return GemmPoint(m=m, n=n, k=k, dtype=dtype, seconds=seconds, where=where)


def _attention(row: dict, seconds: float, where: str) -> AttentionPoint:
    kernel = row["kernel"].lower()
    if kernel not in ATTENTION_PASSES:
        raise ConfigError("kernel", kernel, f"must be one of {', '.join(ATTENTION_PASSES)}",
                          source=where)
    causal = row["causal"].lower()
    if causal not in ("0", "1", "true", "false"):
        raise ConfigError("causal", causal, "must be true/false or 1/0", source=where)
    b, h, s, d = (_number(row, c, where) for c in ("batch", "heads", "seq", "head_dim"))
    if min(b, h, s, d) <= 0:
        raise ConfigError("batch,heads,seq,head_dim", (b, h, s, d), "must be > 0",
                          source=where)
    return AttentionPoint(batch=b, heads=h, seq=s, head_dim=d,
                          causal=causal in ("1", "true"), kernel=kernel, seconds=seconds,
                          where=where)
