"""Start-up: whole-process `clustersim run` against the Python import floor, side by side.

    python benchmarks/bench_startup.py              # writes its section of the report
    python benchmarks/bench_startup.py --no-write   # print only
    python benchmarks/bench_startup.py --repeats 15

Each round starts, one after another, fresh Python processes for:

* **floor**: ``import numpy, simpy, pydantic, yaml`` (what any run must load);
* **import simulator**: ``import simulator``;
* **run**: ``clustersim run llama3-405b --topology dgx-h100 --format json``, started
  the way the console script starts it (``from simulator.cli.main import main``);
* **help**: ``clustersim --help`` (lists every command, imports none of them).

The simulator's modules are byte-compiled first (``compileall``), as pip does when it
installs a wheel: the site-packages behind the floor have their ``.pyc`` files, and a
checkout run under ``PYTHONDONTWRITEBYTECODE=1`` would otherwise recompile every module
on every start. Rounds interleave the cases so that a busy, shared machine slows all of them alike;
the figure is the median wall time over the rounds, and the ratios divide by the
floor measured in the same run. Target (issue 16): run / floor <= 1.6. A
benchmark, not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report_section import write_section

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reports" / "benchmarks_startup.md"
RUN = ["run", "llama3-405b", "--topology", "dgx-h100", "--format", "json"]
CASES = {
    "floor": "import numpy, simpy, pydantic, yaml",
    "import simulator": "import simulator",
    "clustersim run llama3-405b -t dgx-h100 --format json":
        f"import sys; from simulator.cli.main import main; sys.exit(main({RUN!r}))",
    "clustersim --help":
        "import sys; from simulator.cli.main import main; sys.exit(main(['--help']))",
}


def _once(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(repeats: int) -> dict[str, float]:
    """Median wall seconds of each case over ``repeats`` interleaved rounds (one warm-up)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    compileall.compile_dir(ROOT / "simulator", quiet=1)  # as an installed wheel has them
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for code in CASES.values():  # warm-up: page cache, .pyc files
        _once(code, env)
    for _ in range(repeats):
        for name, code in CASES.items():
            times[name].append(_once(code, env))
    return {name: statistics.median(ts) for name, ts in times.items()}


def section(medians: dict[str, float], repeats: int) -> str:
    floor = medians["floor"]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "## Start-up: whole process against the import floor (issue 16)",
        "",
        "Reproduce with `python benchmarks/bench_startup.py` (writes this section).",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average {load} at the end. Median wall time of "
        f"{repeats} interleaved rounds of fresh processes; the floor is "
        "`python -c 'import numpy, simpy, pydantic, yaml'`, measured in the same run.",
        "",
        "| process | median wall | / floor |",
        "|---|---|---|",
    ]
    for name, t in medians.items():
        lines.append(f"| `{name}` | {t * 1e3:.0f} ms | {t / floor:.2f} |")
    ratio = medians[next(k for k in CASES if k.startswith("clustersim run"))] / floor
    verdict = "met" if ratio <= 1.6 else "NOT met"
    lines += ["", f"Target: `clustersim run` within 1.6x of the floor: {verdict} ({ratio:.2f}x)."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    text = section(measure(args.repeats), args.repeats)
    print(text)
    if not args.no_write:
        write_section(OUT, "bench_startup", text)
        print(f"\nwrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
