"""``clustersim sweep``: simulate every configuration of a sweep YAML into CSV / Parquet.

The YAML format is described in :mod:`simulator.sweep.spec`; an example is
``sweeps/llama3-70b-plans.yaml``. Invalid combinations become rows with
``status`` ``invalid`` and a ``reason``; a summary and the most common
reasons go to stderr. Exit status 1 if any configuration hit a simulator
error (its row says which), else 0.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from ..errors import ConfigError
from ..optional import require
from ..sweep import load_sweep, sweep_table, write_csv, write_parquet
from ..sweep.executors import KINDS
from .common import check_extension, check_numbers

NAME = "sweep"
HELP = "simulate every configuration of a sweep YAML (axes over any field) into CSV/Parquet"


def add_executor_arguments(p: argparse.ArgumentParser) -> None:
    """``--executor``, ``--scheduler``, ``--workers``, ``--store`` (shared with search)."""
    p.add_argument("--executor", choices=KINDS, default="local",
                   help="local processes (default), an existing Dask cluster, or serial")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="Dask scheduler address for --executor dask, e.g. tcp://10.0.0.5:8786")
    p.add_argument("--workers", type=int, metavar="N",
                   help="local worker processes (default: all cores)")
    p.add_argument("--store", metavar="DIR",
                   help="append results to DIR/results.sqlite as they finish and reuse what "
                        "is there (resume after a crash)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="sweep YAML path or shipped name (see `clustersim list`)")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="write the table to PATH atomically: CSV (.csv or no extension) or "
                        "Parquet (.parquet) (default: CSV on stdout)")
    p.add_argument("--parquet", metavar="PATH", help="write the table as Parquet")
    add_executor_arguments(p)


def run(args: argparse.Namespace) -> int:
    check_numbers(args, workers="positive")
    if check_extension(args.output, {"": "csv", "csv": "csv", "parquet": "parquet"}) \
            == "parquet":
        if args.parquet:
            raise ConfigError("--output", args.output, "names a Parquet file and so does "
                              "--parquet; give one")
        args.parquet, args.output = args.output, None  # -o x.parquet: Parquet, as it says
    check_extension(args.parquet, {"": "parquet", "parquet": "parquet"}, "--parquet")
    if args.parquet:  # fail before the sweep runs, not after
        require("pyarrow", "--parquet")
    spec = load_sweep(args.sweep)
    # Plain rows: CSV needs no pandas (simulator/sweep/table.py); Parquet builds the frame.
    table = sweep_table(spec, executor=args.executor, scheduler=args.scheduler,
                        workers=args.workers, store=args.store)
    if args.output:
        write_csv(table, args.output)
    if args.parquet:
        write_parquet(table.frame(), args.parquet)
    if not args.output and not args.parquet:
        table.write_csv(sys.stdout)
    counts = table.counts
    print(f"clustersim sweep: {counts['configurations']} configurations "
          f"({counts['distinct']} distinct valid): {counts['from_store']} from store, "
          f"{counts['simulated']} simulated, {counts['invalid']} invalid, "
          f"{counts['errors']} errors", file=sys.stderr)
    for status in ("invalid", "error"):
        reasons = Counter(row["reason"] for row in table.rows if row["status"] == status)
        for reason, n in reasons.most_common(5):
            print(f"  {n} {status}: {reason}", file=sys.stderr)
    return 1 if counts["errors"] else 0
