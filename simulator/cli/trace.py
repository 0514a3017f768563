"""``clustersim trace``: write a Chrome / Perfetto trace of one simulated training step.

Open the JSON in https://ui.perfetto.dev or chrome://tracing: one process per
pipeline stage, one thread per stream (compute, TP / CP / EP collectives, PP
sends, DP gradient sync, optimizer). See :mod:`simulator.report.trace`.
"""

from __future__ import annotations

import argparse
import sys

from ..api import resolve, simulate_resolved
from ..errors import ConfigError
from ..report.trace import DETAILS, chrome_trace, write_trace
from .common import add_config_arguments, overrides, workload_overrides

NAME = "trace"
HELP = "write a Chrome/Perfetto trace (JSON) of one simulated step of WORKLOAD"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE.json",
                   help="trace file to write (trace-event JSON)")
    p.add_argument("--detail", choices=DETAILS, default="op",
                   help="op: every kernel and collective inside each phase (default); "
                        "phase: forward/backward phases only (smaller file)")


def run(args: argparse.Namespace) -> int:
    if not args.output.endswith(".json"):
        raise ConfigError("--output", args.output, "must end in .json")
    w, t = resolve(args.workload, args.topology, workload_overrides(args),
                   overrides(args.set_topology))
    result, plan, engine = simulate_resolved(w, t, keep_records=True)
    trace = chrome_trace(plan, engine, result, detail=args.detail)
    path = write_trace(args.output, trace)
    n = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    print(f"wrote {path}: {n} events, step {engine.step_time * 1e3:.3f} ms as replayed, "
          f"{result.step_time_s * 1e3:.3f} ms expected with the waits for the slowest peers "
          f"(open in https://ui.perfetto.dev)", file=sys.stderr)
    return 0
