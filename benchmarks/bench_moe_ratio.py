"""Benchmark: DeepSeek-V3 over the dense Llama 3 405B, in interleaved rounds (issue 16).

The bar is a ratio of two in-process step simulations on a shared, noisy machine, so it
is measured as many ratios, each from one round in which both run back to back (CPU time
of ``simulate_resolved`` on dgx-h100, the best of ``--best`` calls each), and reported as
their median and range with the load average. Print only.

    python benchmarks/bench_moe_ratio.py              # 15 rounds
    python benchmarks/bench_moe_ratio.py --rounds 30 --best 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from simulator.api import resolve, simulate_resolved
from simulator.workload.moe.costs import clear_moe_caches

PAIR = ("deepseek-v3", "llama3-405b")


def _cpu(w, t) -> float:
    """CPU seconds of one simulation, its MoE router tables drawn afresh (as a new
    configuration's would be; a process keeps them for searches)."""
    clear_moe_caches()
    t0 = time.process_time()
    simulate_resolved(w, t)
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--best", type=int, default=3, help="calls per workload and round")
    args = ap.parse_args()
    cases = [resolve(name, "dgx-h100") for name in PAIR]
    for w, t in cases:
        simulate_resolved(w, t)  # warm-up (imports, caches)
    ratios, times = [], {name: [] for name in PAIR}
    for _ in range(args.rounds):
        best = [min(_cpu(w, t) for _ in range(args.best)) for w, t in cases]
        ratios.append(best[0] / best[1])
        for name, b in zip(PAIR, best, strict=True):
            times[name].append(b)
    print(f"{PAIR[0]} / {PAIR[1]}: median {statistics.median(ratios):.2f}x, range "
          f"{min(ratios):.2f}-{max(ratios):.2f} over {args.rounds} rounds (best of "
          f"{args.best} each); " + ", ".join(
              f"{n} median {statistics.median(v) * 1e3:.1f} ms" for n, v in times.items())
          + "; load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
