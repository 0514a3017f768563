"""Start-up: whole-process `clustersim run` against the Python import floor, side by side.

    python benchmarks/bench_startup.py              # writes its section of the report
    python benchmarks/bench_startup.py --no-write   # print only
    python benchmarks/bench_startup.py --repeats 15

Each round starts, one after another, fresh Python processes for:

* **floor**: ``import numpy, simpy, pydantic, yaml`` (the issue's floor);
* **floor without simpy**: what ``run`` itself loads of the four (the direct replay needs
  no event loop; simpy loads for traces), shown so the ratio's source is visible;
* **floor + BaseModel**: the floor plus ``from pydantic import BaseModel``, the model
  machinery that a bare ``import pydantic`` leaves unloaded and any pydantic schema needs
  (before one model is built);
* **import simulator**: ``import simulator``;
* **run**: ``clustersim run llama3-405b --topology dgx-h100 --format json``, started
  the way the console script starts it (``from simulator.cli.main import main``);
* **help**: ``clustersim --help`` (lists every command, imports none of them);
* **version**: ``clustersim --version`` (imports no simulator module past the CLI's);
* **time-to-train**: Llama 3 405B on 16,384 H100, 15T tokens, the default 200
  Monte-Carlo runs (issue 33: <= 2x the floor).

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
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report_section import write_section

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reports" / "benchmarks.md"
RUN = ["run", "llama3-405b", "--topology", "dgx-h100", "--format", "json"]
TTT = ["time-to-train", "llama3-405b", "--topology", "dgx-h100", "--tokens", "15e12",
       "--format", "json"]  # 200 Monte-Carlo runs of ~615 failures each (issue 33.7: <= 2x)
CASES = {
    "floor": "import numpy, simpy, pydantic, yaml",
    "floor without simpy": "import numpy, pydantic, yaml",
    "floor + BaseModel": "import numpy, simpy, pydantic, yaml; from pydantic import BaseModel",
    "import simulator": "import simulator",
    "clustersim run llama3-405b -t dgx-h100 --format json":
        f"import sys; from simulator.cli.main import main; sys.exit(main({RUN!r}))",
    "clustersim --help":
        "import sys; from simulator.cli.main import main; sys.exit(main(['--help']))",
    "clustersim --version":
        "import sys; from simulator.cli.main import main; sys.exit(main(['--version']))",
    "clustersim time-to-train llama3-405b -t dgx-h100 --tokens 15e12":
        f"import sys; from simulator.cli.main import main; sys.exit(main({TTT!r}))",
}


def _once(code: str, env: dict[str, str], root: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one fresh process running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, cwd=root, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(repeats: int, root: Path = ROOT) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of each case over ``repeats`` interleaved rounds."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    compileall.compile_dir(root / "simulator", quiet=1)  # as an installed wheel has them
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
    for code in CASES.values():  # warm-up: page cache, .pyc files
        _once(code, env, root)
    for _ in range(repeats):
        for name, code in CASES.items():
            times[name].append(_once(code, env, root))
    return {name: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
            for name, ts in times.items()}


def section(medians: dict[str, tuple[float, float]], repeats: int) -> str:
    floor_wall, floor_cpu = medians["floor"]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "## Start-up: whole process against the import floor (issue 16)",
        "",
        "Reproduce with `python benchmarks/bench_startup.py` (writes this section).",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average {load} at the end. Medians of "
        f"{repeats} interleaved rounds of fresh processes; the floor is "
        "`python -c 'import numpy, simpy, pydantic, yaml'`, measured in the same run. "
        "CPU = user + system time of the process, which a busy machine disturbs far "
        "less than wall time.",
        "",
        "| process | median wall | / floor | median CPU | / floor |",
        "|---|---|---|---|---|",
    ]
    for name, (wall, cpu) in medians.items():
        lines.append(f"| `{name}` | {wall * 1e3:.0f} ms | {wall / floor_wall:.2f} "
                     f"| {cpu * 1e3:.0f} ms | {cpu / floor_cpu:.2f} |")
    run_wall, run_cpu = medians[next(k for k in CASES if k.startswith("clustersim run"))]
    ratio, cpu_ratio = run_wall / floor_wall, run_cpu / floor_cpu
    lines += ["", f"Target: `clustersim run` within 1.6x of the floor in wall time: "
                  f"{'met' if ratio <= 1.6 else 'NOT met'} ({ratio:.2f}x); in CPU time, the "
                  f"figure a busy machine moves least: {cpu_ratio:.2f}x "
                  f"({'within' if cpu_ratio <= 1.6 else 'above'} 1.6)."]
    ttt_wall, ttt_cpu = medians[next(k for k in CASES if k.startswith("clustersim time"))]
    lines += [f"Target (issue 33): `clustersim time-to-train` of the 405B on 16,384 GPUs within "
              f"2x of the floor: {ttt_wall / floor_wall:.2f}x wall, {ttt_cpu / floor_cpu:.2f}x "
              f"CPU ({'met' if ttt_cpu / floor_cpu <= 2 else 'NOT met'})."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="measure another checkout (e.g. before a change); implies --no-write")
    args = ap.parse_args()
    text = section(measure(args.repeats, args.root.resolve()), args.repeats)
    print(text)
    if not args.no_write and args.root.resolve() == ROOT:
        write_section(OUT, "bench_startup", text)
        print(f"\nwrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
