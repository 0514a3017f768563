"""``clustersim bench-kernels``: time GEMM and attention kernels here, for ``calibrate``."""

from __future__ import annotations

import argparse
import sys

NAME = "bench-kernels"
HELP = ("time GEMM and attention kernels on this GPU with torch and write the CSV "
        "`clustersim calibrate` reads")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, metavar="KERNELS.csv",
                   help="the kernel-timings CSV (written atomically)")
    p.add_argument("--dtypes", nargs="+", default=["bf16", "fp8"],
                   choices=["bf16", "fp16", "fp8"], help="GEMM precisions (default bf16 fp8)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per kernel (median)")
    p.add_argument("--quick", action="store_true", help="fewer shapes (about a minute)")


def run(args: argparse.Namespace) -> int:
    from ..calibrate import bench
    from ..errors import ConfigError
    from ..io import atomic_write_text

    if args.iters < 1:
        raise ConfigError("--iters", args.iters, "must be >= 1")
    rows = bench.run(tuple(args.dtypes), iters=args.iters, quick=args.quick)
    atomic_write_text(args.output, bench.to_csv(rows))
    print(f"wrote {args.output} ({len(rows)} kernels)", file=sys.stderr)
    return 0
