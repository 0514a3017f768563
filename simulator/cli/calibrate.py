"""``clustersim calibrate``: fit a topology's constants to your own cluster's measurements."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import ConfigError
from .common import overrides

NAME = "calibrate"
HELP = ("fit a topology's constants to your measurements (nccl-tests, kernel timings, "
        "profiler traces, step times / logs) and write a calibrated topology")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topology", help="base topology YAML path or shipped name (e.g. dgx-h100)")
    p.add_argument("--measurements", "-m", nargs="+", required=True, metavar="FILE",
                   help="nccl-tests *_perf output, kernel-timings CSV (clustersim "
                        "bench-kernels), Kineto trace JSON, runs YAML or training log "
                        "(with LOG.run.yaml beside it); the format is read from the content")
    p.add_argument("-o", "--output", required=True, metavar="MY_CLUSTER.yaml",
                   help="the calibrated topology YAML (written atomically)")
    p.add_argument("--report", metavar="REPORT.md|.json",
                   help="fit report: residuals, leave-one-out errors, identified constants, "
                        "traced vs simulated time per op kind, intervals")
    p.add_argument("--min-bytes", type=float, default=0.0, metavar="B",
                   help="ignore nccl-tests rows smaller than B bytes (default 0: all)")
    p.add_argument("--hold", nargs="+", default=[], metavar="CONSTANT",
                   help="keep these constants at the base values (dotted path or a prefix "
                        "such as tiers.0), e.g. a tier calibrated on other data")
    p.add_argument("--set-topology", action="append", default=[], metavar="FIELD=VALUE",
                   help="set a base topology field before fitting, e.g. the NICs' line rate "
                        "tiers.1.bandwidth_GBps=25 (repeatable)")
    p.add_argument("--date", default=None, help="date written into the sources "
                   "(default: today, ISO 8601)")


def run(args: argparse.Namespace) -> int:
    from ..calibrate import calibrate, report, write

    out = Path(args.output)
    if out.suffix not in (".yaml", ".yml"):
        raise ConfigError("--output", args.output, "must end in .yaml or .yml")
    if args.report and Path(args.report).suffix not in (".md", ".json"):
        raise ConfigError("--report", args.report, "must end in .md or .json")
    if args.min_bytes < 0 or args.min_bytes != args.min_bytes:
        raise ConfigError("--min-bytes", args.min_bytes, "must be a number >= 0")
    cal = calibrate(args.topology, args.measurements, date=args.date,
                    min_bytes=args.min_bytes, hold=tuple(args.hold),
                    base_overrides=overrides(args.set_topology))
    write.write(cal, out)
    print(f"wrote {out}", file=sys.stderr)
    if args.report:
        report.write(cal, args.report)
        print(f"wrote {args.report}", file=sys.stderr)
    for c in report.constants(cal):
        state = (f"{c['base']:.4g} -> {c['value']:.4g}" if c["identified"]
                 else f"{c['base']:.4g} kept (not identified: {c['would_identify']})")
        print(f"  {c['constant']:<32} {state}")
    for st in cal.stages:
        print(f"  {st.stage}: {st.n} measurements, leave-one-out error {st.loo_text}")
    return 0
