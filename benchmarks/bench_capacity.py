"""Capacity grid: 3 topologies x 8 GPU counts of Llama 3 70B, wall and CPU time (issue 32).

    python benchmarks/bench_capacity.py            # the grid, 2 local workers
    python benchmarks/bench_capacity.py --write    # + its section of reports/benchmarks.md

The grid: ``clustersim capacity llama3-70b --tokens 2e12 --topology
dgx-h100,dgx-b200,gb200-nvl72 --gpus 128,256,512,1024,2048,4096,8192,16384`` (24 cells:
each a plan search in the capacity plan space, MBS 1-2 and sequence parallelism with every
TP > 1, then time-to-train with 200 Monte-Carlo runs). Wall time, and the CPU time of this
process and its workers (which a shared, loaded machine disturbs far less). The target is
under a minute on 2 cores. A benchmark, not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

from simulator.capacity import capacity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_section import write_section

TOPOLOGIES = ["dgx-h100", "dgx-b200", "gb200-nvl72"]
GPUS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
REPORT = Path(__file__).resolve().parents[1] / "reports" / "benchmarks.md"


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process and of its (finished) worker processes."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="write the report section")
    args = ap.parse_args(argv)
    t0, c0 = time.perf_counter(), _cpu()
    df = capacity("llama3-70b", 2e12, TOPOLOGIES, GPUS, workers=args.workers,
                  prices={"dgx-h100": 2.5, "dgx-b200": 3.5, "gb200-nvl72": 4.0})
    c1 = _cpu()
    wall, parent, kids = time.perf_counter() - t0, c1[0] - c0[0], c1[1] - c0[1]
    idle = parent + kids / args.workers  # the parent's share is serial, the workers' parallel
    ok = int((df.status == "ok").sum())
    body = "\n".join([
        "## Capacity grid (issue 32)",
        "",
        "Reproduce with `python benchmarks/bench_capacity.py --write` (writes this section).",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average "
        + ", ".join(f"{x:.1f}" for x in os.getloadavg()) + " at the end.",
        "",
        f"`clustersim capacity llama3-70b --tokens 2e12 --topology {','.join(TOPOLOGIES)} "
        f"--gpus {','.join(map(str, GPUS))}` with {args.workers} local workers: "
        f"{len(df)} cells ({ok} with a plan), each a plan search in the capacity space "
        "(MBS 1-2, sequence parallelism with every TP > 1) and a time-to-train.",
        "",
        "| cells | wall (s) | CPU parent (s) | CPU workers (s) | idle estimate (s) | target |",
        "|---:|---:|---:|---:|---:|---|",
        f"| {len(df)} | {wall:.1f} | {parent:.1f} | {kids:.1f} | {idle:.1f} | "
        "< 60 s wall on 2 cores |",
        "",
        "The idle estimate is the wall time on an otherwise idle machine with these workers: "
        "the parent's CPU (plan generation and validation, the winners' runs, "
        "time-to-train) is serial, the workers' (memory fit, bound, simulations) parallel. "
        "The wall time above is what this shared box gave at the load shown.",
        "",
        f"Simulated plans per cell: median {int(df.plans_simulated.median())}; "
        f"frontier: {int(df.on_frontier.sum())} rows.",
    ])
    print(body)
    if args.write:
        write_section(REPORT, "bench_capacity", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
