"""Step times from MLPerf Training submission logs, as ``validation/mlperf/`` reads them.

``python -m simulator.validation.mlperf_logs RESULT_DIR_OR_FILES...`` reads the ``:::MLLOG``
lines of a submission's ``result_*.txt`` files (mlcommons/training_results_v*, under
``<submitter>/results/<system>/<benchmark>/``) and prints one row per way the logs let a
step be timed, each the median over every training block of every log:

* ``blocks``: a block's duration (``block_start`` .. ``block_stop``, evaluation outside)
  over its steps. The steps are the block's tokens over GBS x sequence length where
  ``block_start`` carries ``epoch_count`` (the GPT-3 logs count tokens), else the samples
  between consecutive ``eval_start`` counts over GBS (the first block counts from 0);
* ``tracked``: the mean of the per-step ``train_step_time`` (or ``train_step_timing in s``)
  that ``tracked_stats`` logs inside each block, for logs that write no ``block_stop``;
* ``throughput``: GBS over the ``throughput`` (samples/s) that ``tracked_stats`` logs once a
  block (the Llama 2 70B LoRA logs).

Units: seconds per optimizer step. The logs' ``global_batch_size`` and
``max_sequence_length`` keys give GBS and the sequence length (``--seq`` where a log lacks
it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

MARK = ":::MLLOG"
STEP_KEYS = ("train_step_time", "train_step_timing in s")


@dataclass(frozen=True)
class Timing:
    """One way of timing a step: the per-block values (s) and the logs they came from."""

    method: str
    logs: int
    blocks: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.blocks)


def events(text: str) -> list[dict]:
    """The MLLOG events of one log's text, in order (lines that do not parse are skipped)."""
    out = []
    for line in text.splitlines():
        i = line.find(MARK)
        if i < 0:
            continue
        try:
            out.append(json.loads(line[i + len(MARK):]))
        except json.JSONDecodeError:
            continue
    return out


def _value(evs: list[dict], key: str):
    return next((e["value"] for e in evs if e.get("key") == key), None)


def _stats(e: dict) -> dict:
    v = e.get("value")
    return v if e.get("key") == "tracked_stats" and isinstance(v, dict) else {}


def block_steps(evs: list[dict], seq: int | None = None) -> list[float]:
    """Seconds per step of each block that has a start and a stop (see module docs)."""
    gbs = _value(evs, "global_batch_size")
    seq = _value(evs, "max_sequence_length") or seq
    if not gbs:
        return []
    evals = [e["metadata"]["samples_count"] for e in evs
             if e.get("key") == "eval_start" and "samples_count" in e.get("metadata", {})]
    out, start, done = [], None, 0
    for e in evs:
        if e.get("key") == "block_start":
            start = e
        elif e.get("key") == "block_stop" and start is not None:
            meta = start.get("metadata", {})
            if "epoch_count" in meta and seq:
                steps = meta["epoch_count"] / (gbs * seq)
            elif done < len(evals):
                steps = (evals[done] - (evals[done - 1] if done else 0)) / gbs
            else:
                steps = 0
            if steps > 0:
                out.append((e["time_ms"] - start["time_ms"]) / 1000 / steps)
            done, start = done + 1, None
    return out


def tracked_steps(evs: list[dict]) -> list[float]:
    """Per block (between consecutive ``block_start``), the mean logged step time, s."""
    out, cur = [], None
    for e in evs:
        if e.get("key") == "block_start":
            if cur:
                out.append(statistics.fmean(cur))
            cur = []
        elif cur is not None:
            stats = _stats(e)
            cur += [stats[k] for k in STEP_KEYS if k in stats]
    if cur:
        out.append(statistics.fmean(cur))
    return out


def throughput_steps(evs: list[dict]) -> list[float]:
    """GBS over each throughput (samples/s) logged inside a training block, s; a value
    logged outside every block (a run summary) is not a block's rate and is skipped."""
    gbs = _value(evs, "global_batch_size")
    if not gbs:
        return []
    out, open_block = [], False
    for e in evs:
        key = e.get("key")
        if key in ("block_start", "block_stop"):
            open_block = key == "block_start"
        elif open_block and (rate := _stats(e).get("throughput")):
            out.append(gbs / rate)
    return out


def timings(texts: list[str], seq: int | None = None) -> list[Timing]:
    """Every way the logs let a step be timed, with at least one block."""
    logs = [events(t) for t in texts]
    logs = [evs for evs in logs if evs]
    ways = (("blocks", lambda evs: block_steps(evs, seq)), ("tracked", tracked_steps),
            ("throughput", throughput_steps))
    out = []
    for name, fn in ways:
        per = [fn(evs) for evs in logs]
        blocks = [x for p in per for x in p]
        if blocks:
            out.append(Timing(name, sum(1 for p in per if p), blocks))
    return out


def _files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.glob("result_*.txt")) if p.is_dir() else [p]
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="result_*.txt files or the folders holding them")
    ap.add_argument("--seq", type=int, default=None,
                    help="sequence length where the logs lack max_sequence_length")
    args = ap.parse_args(argv)
    files = _files(args.paths)
    missing = [str(f) for f in files if not f.is_file()]
    if not files or missing:
        print(f"mlperf_logs: no result file at {', '.join(missing or args.paths)}",
              file=sys.stderr)
        return 2
    found = timings([f.read_text(errors="replace") for f in files], args.seq)
    if not found:
        print("mlperf_logs: no timed training block in these logs", file=sys.stderr)
        return 2
    print("| method | logs | blocks | median s/step | min | max |")
    print("|---|---:|---:|---:|---:|---:|")
    for t in found:
        print(f"| {t.method} | {t.logs} | {len(t.blocks)} | {t.median:.4f} | "
              f"{min(t.blocks):.4f} | {max(t.blocks):.4f} |")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
