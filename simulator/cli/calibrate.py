"""``clustersim calibrate``: fit a topology's constants to your own cluster's measurements."""

from __future__ import annotations

import argparse
import re
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
    p.add_argument("--min-bytes", default="0", metavar="SIZE",
                   help="ignore nccl-tests rows smaller than SIZE: bytes, or with a unit as "
                        "nccl-tests writes them (32M, 32MiB, 1G, 512K; default 0: all)")
    p.add_argument("--hold", nargs="+", default=[], metavar="CONSTANT",
                   help="keep these constants at the base values (dotted path or a prefix "
                        "such as tiers.0), e.g. a tier calibrated on other data")
    p.add_argument("--set-topology", action="append", default=[], metavar="FIELD=VALUE",
                   help="set a base topology field before fitting, e.g. the NICs' line rate "
                        "tiers.1.bandwidth_GBps=25 (repeatable)")
    p.add_argument("--date", default=None, help="date written into the sources "
                   "(default: today, ISO 8601)")


UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20,
         "MIB": 2**20, "G": 2**30, "GB": 2**30, "GIB": 2**30}  # nccl-tests' -b / -e: powers of 2


def size_bytes(text: str) -> float:
    """``--min-bytes``: a byte count, with an optional unit as nccl-tests' ``-b`` takes it
    (K / M / G are powers of two there, and so are KB / KiB ...)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in UNITS:
        raise ConfigError("--min-bytes", text, "must be a size >= 0 in bytes, optionally with "
                          "a unit: K, M, G (or KiB, MiB, GiB), e.g. 32M")
    return float(m.group(1)) * UNITS[m.group(2).upper()]


def run(args: argparse.Namespace) -> int:
    from ..calibrate import calibrate, report, write

    out = Path(args.output)
    if out.suffix not in (".yaml", ".yml"):
        raise ConfigError("--output", args.output, "must end in .yaml or .yml")
    if args.report and Path(args.report).suffix not in (".md", ".json"):
        raise ConfigError("--report", args.report, "must end in .md or .json")
    cal = calibrate(args.topology, args.measurements, date=args.date,
                    min_bytes=size_bytes(args.min_bytes), hold=tuple(args.hold),
                    base_overrides=overrides(args.set_topology))
    text = report.render(cal, args.report) if args.report else None  # both, or neither
    write.write(cal, out)
    print(f"wrote {out}", file=sys.stderr)
    if args.report:
        report.write(cal, args.report, text)
        print(f"wrote {args.report}", file=sys.stderr)
    for c in report.constants(cal):
        state = (f"{c['base']:.4g} -> {c['value']:.4g}" if c["identified"]
                 else f"{c['base']:.4g} kept (not identified: {c['would_identify']})")
        print(f"  {c['constant']:<32} {state}")
    for st in cal.stages:
        print(f"  {st.stage}: {st.n} measurements, leave-one-out error {st.loo_text}")
    return 0
