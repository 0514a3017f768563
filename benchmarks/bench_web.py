"""`clustersim serve` under load: start-up, latency of the page's calls, a concurrent burst.

    python benchmarks/bench_web.py              # writes its section of reports/web.md
    python benchmarks/bench_web.py --no-write   # print only

Starts the real server (``python -m simulator serve``, two workers) on a loopback port and
measures, in wall time on this machine:

* **start-up**: until ``GET /`` answers, and until the first ``POST /api/run`` does (the
  workers import the simulator meanwhile);
* **latency**: ``POST /api/run`` and ``POST /api/detail`` for Llama 3 70B on dgx-h100, each
  request a new global batch size (no cache hit), then one repeated (a cache hit);
* **bursts**: 200 concurrent ``POST /api/run`` (loopback only, 200 threads), four times:
  how many were served and how many refused at once by the bounded queue (503), and the
  server process's resident memory after each burst.

A benchmark, not a test: nothing here asserts (``tests/test_web_server.py`` does).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(Path(__file__).resolve().parent)]

from report_section import write_section  # noqa: E402
from test_web_server import post, rss_kB, start_server  # noqa: E402

OUT = ROOT / "reports" / "web.md"
BASE = {"workload": "llama3-70b", "topology": "dgx-h100"}


def latency(url: str, path: str, offset: int, n: int = 20) -> list[float]:
    times = []
    for i in range(n):
        body = {**BASE, "overrides": {"training.global_batch_size": 8 * (17 + offset + i)}}
        t = time.monotonic()
        post(url + path, body)
        times.append(time.monotonic() - t)
    return times


def burst(url: str, offset: int) -> tuple[int, int, float]:
    bodies = [{"workload": "tiny", "topology": "dgx-h100",
               "overrides": {"training.seed": offset + i % 40}} for i in range(200)]
    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=200) as pool:
        codes = list(pool.map(lambda b: post(url + "/api/run", b)[0], bodies))
    return codes.count(200), codes.count(503), time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT)
    t0 = time.monotonic()
    proc, url = start_server()
    page_s = time.monotonic() - t0
    post(url + "/api/run", BASE)
    first_s = time.monotonic() - t0
    try:
        run = latency(url, "/api/run", 0)
        detail = latency(url, "/api/detail", 100)
        t = time.monotonic()
        post(url + "/api/run", {**BASE, "overrides": {"training.global_batch_size": 136}})
        cached = time.monotonic() - t
        bursts = []
        for k in range(4):
            served, refused, wall = burst(url, 1000 * k)
            bursts.append((served, refused, wall, rss_kB(proc.pid)))
    finally:
        proc.terminate()
        proc.wait(10)
    ms = lambda xs: f"median {statistics.median(xs) * 1e3:.0f} ms, max {max(xs) * 1e3:.0f} ms"  # noqa: E731
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "## `clustersim serve` (benchmarks/bench_web.py)", "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
        f"{load:.1f} at the start; two workers.", "",
        f"- start-up: page after {page_s:.2f} s, first `/api/run` after {first_s:.2f} s",
        f"- `POST /api/run`, Llama 3 70B on dgx-h100, 20 new batch sizes: {ms(run)}; "
        f"a repeated request (cache): {cached * 1e3:.1f} ms",
        f"- `POST /api/detail` (adds the timeline's records and memory per stage): {ms(detail)}",
        "", "| burst of 200 | served | refused (503) | wall | server RSS after |",
        "|---|---|---|---|---|",
        *[f"| {k + 1} | {s} | {r} | {w:.2f} s | {m / 1024:.1f} MiB |"
          for k, (s, r, w, m) in enumerate(bursts)],
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        write_section(OUT, "bench_web", text)


if __name__ == "__main__":
    main()
