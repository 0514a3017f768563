"""Sweep throughput: configurations simulated per second per core, and a plan search.

    python benchmarks/bench_sweep.py                 # everything, all cores
    python benchmarks/bench_sweep.py --no-search     # skip the plan searches
    python benchmarks/bench_sweep.py --profile       # + where one dense config's time goes
    python benchmarks/bench_sweep.py --write         # + its section of the startup report

Workloads:

* dense: Llama 3 70B on 1,024 GPUs of dgx-h100, global batch 1,024 sequences,
  TP {2,4,8} x PP {4,8,16} x (1F1B | interleaved VP 2 | VP 5) x MBS {1,2}
  = 54 configurations (``num_gpus`` fixes DP = 1024 / (TP*PP));
* MoE: Mixtral 8x7B on 256 GPUs of dgx-h100, TP {1,2} x EP {4,8} x PP {1,2,4}
  = 12 configurations;
* search: ``clustersim search llama3-70b --gpus 1024`` (about 10^4 plans) and the MoE
  ``clustersim search mixtral-8x7b --gpus 64`` (about 1.6 * 10^4 plans, router draws
  per plan);
* GPU count: one fixed plan shape (Llama 3 8B, TP4 PP2, MBS 1, 16 micro-batches per
  replica) on 8 to 131,072 GPUs (only DP and the global batch grow), CPU time per
  plan through the sweep path (resolve, simulate, JSON outcome), median of repeats.

"Per worker" divides the wall-clock rate by the worker processes; "per
CPU-second" divides the configurations by the CPU time this process and its
workers used, which stays meaningful on a shared, loaded machine. Prints a Markdown section for
reports/benchmarks_sweep.md. A benchmark, not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from simulator.engine import NullRecorder, run_engine
from simulator.hardware import Topology
from simulator.memory import estimate_memory
from simulator.metrics import summarize
from simulator.sweep import search, sweep
from simulator.sweep.resolve import Documents, resolve_point
from simulator.sweep.spec import Point
from simulator.sweep.tasks import simulate_task
from simulator.workload.plan import build_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_section import write_section

OUT = Path(__file__).resolve().parents[1] / "reports" / "benchmarks.md"
GPU_COUNTS = (8, 64, 1024, 16384, 131072)

DENSE = dict(workload="llama3-70b", topology="dgx-h100",
             axes={"parallelism.tensor": [2, 4, 8], "parallelism.pipeline": [4, 8, 16],
                   "training.micro_batch_size": [1, 2], "num_gpus": [1024]},
             zip_axes={"parallelism.pipeline_schedule": ["1f1b", "interleaved", "interleaved"],
                       "parallelism.virtual_pipeline": [None, 2, 5]},
             overrides={"training.global_batch_size": 1024})
MOE = dict(workload="mixtral-8x7b", topology="dgx-h100",
           axes={"parallelism.tensor": [1, 2], "parallelism.expert": [4, 8],
                 "parallelism.pipeline": [1, 2, 4], "num_gpus": [256]},
           overrides={"training.global_batch_size": 512})


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (the pool's workers)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _import_pandas() -> float:
    """CPU seconds of ``import pandas``, which the first sweep table of a process pays.

    Taken out of the rates, as ``import simulator`` is: the rates are the sweep's own
    (issue 6's baseline of 21 per CPU-second predates the lazy import, when ``import
    simulator`` loaded pandas). The figure is printed beside the table."""
    t0 = _cpu()
    import pandas  # noqa: F401 - the import is what is measured

    return _cpu() - t0


FRESH = """\
import sys, time
from simulator.cli.main import main
t0 = time.process_time()
rc = main(["sweep", sys.argv[1], "--executor", "serial", "-o", sys.argv[2]])
print(time.process_time() - t0, int("pandas" in sys.modules), rc)
"""


def _fresh_cli(repeats: int = 3) -> tuple[int, float, bool]:
    """(configurations, median CPU seconds, pandas loaded) of the dense sweep run by
    ``clustersim sweep FILE --executor serial -o CSV`` as the first thing a fresh process
    does after importing the CLI: every lazy import the sweep needs is counted."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "dense.yaml"
        spec.write_text(yaml.safe_dump({
            "workload": DENSE["workload"], "topology": DENSE["topology"],
            "set": DENSE["overrides"], "axes": DENSE["axes"], "zip_axes": DENSE["zip_axes"]}))
        out = Path(tmp) / "dense.csv"
        env = {**os.environ, "PYTHONPATH": str(OUT.parents[1])}
        runs = []
        for _ in range(repeats):
            text = subprocess.run([sys.executable, "-c", FRESH, str(spec), str(out)],
                                  capture_output=True, text=True, check=True, env=env).stdout
            cpu, pandas, _rc = text.split()
            runs.append((float(cpu), pandas == "1"))
        n = len(out.read_text().splitlines()) - 1
    return n, statistics.median(r[0] for r in runs), any(r[1] for r in runs)


def _rates(name: str, case: dict, workers: int) -> tuple[list[str], tuple[int, float]]:
    """Table rows (serial, local) and the serial run's (configurations, CPU seconds)."""
    rows: list[str] = []
    serial = (0, 0.0)
    for executor, n in (("serial", 1), ("local", workers)):
        wall0, cpu0 = time.perf_counter(), _cpu()
        df = sweep(**case, executor=executor, workers=n, progress=False)
        wall, cpu = time.perf_counter() - wall0, _cpu() - cpu0
        total, ok = len(df), int((df.status == "ok").sum())
        serial = serial if serial[0] else (total, cpu)
        # Workers forked by a forkserver (when this process runs other threads) are not
        # our children: their CPU time is not counted, so the figure would be meaningless.
        per_cpu = f"{total / cpu:.2f}" if executor == "serial" or cpu > wall / 2 else "n/a"
        rows.append(f"| {name} | {executor} | {n} | {total} ({ok} ok) | {wall:.1f} s "
                    f"| {total / wall:.2f} | {total / wall / n:.2f} | {per_cpu} |")
    return rows, serial


def _profile_dense() -> list[str]:
    """Where the dense sweep's time goes, stage by stage (serial, as the sweep resolves)."""
    parts = {"resolve": 0.0, "build_plan": 0.0, "run_engine": 0.0, "memory+summarize": 0.0}
    engine: list[tuple[float, int, str]] = []
    simpy_s = 0.0  # the same replays on the SimPy event loop (not in the total)
    from simulator.sweep.resolve import Documents, resolve_point
    from simulator.sweep.spec import expand, make_spec

    spec = make_spec(DENSE["workload"], DENSE["topology"], DENSE["axes"], DENSE["zip_axes"],
                     DENSE["overrides"])
    docs = Documents()
    for p in expand(spec):
        t0 = time.perf_counter()
        r = resolve_point(p, docs)
        w, t = r.workload, r.topology
        topo = Topology.from_config(t)
        t1 = time.perf_counter()
        plan = build_plan(w, topo, ops=False)  # as simulate_resolved without records
        t2 = time.perf_counter()
        run = run_engine(plan.engine_input, NullRecorder())  # as the sweep: direct replay
        t3 = time.perf_counter()
        summarize(plan, run, estimate_memory(w, topo, plan.partition))
        t4 = time.perf_counter()
        simpy_s += _timed(run_engine, plan.engine_input, NullRecorder(), engine="simpy")
        for key, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            parts[key] += dt
        par = w.parallelism
        engine.append((t3 - t2, run.events, f"TP{par.tensor} PP{par.pipeline} VP{par.vp} "
                                            f"MBS{w.training.micro_batch_size}"))
    total = sum(parts.values())
    rows = [f"| {k} | {v:.2f} s | {v / total * 100:.0f} % |" for k, v in parts.items()]
    engine.sort(reverse=True)
    top = engine[: max(1, len(engine) // 10)]
    share = sum(e[0] for e in top) / parts["run_engine"] * 100
    rows.append(f"\nThe same replays on the SimPy event loop (`engine=\"simpy\"`, measured "
                f"in the same run, not in the table): {simpy_s:.2f} s, "
                f"{simpy_s / parts['run_engine']:.1f}x the direct replay.")
    rows.append(f"\nThe slowest tenth of the configurations ({len(top)}, led by {top[0][2]}: "
                f"{top[0][0] * 1e3:.0f} ms, {top[0][1]} engine records) take {share:.0f} % of "
                f"the engine time; the median configuration takes "
                f"{engine[len(engine) // 2][0] * 1e3:.0f} ms in the engine.")
    return rows


def _timed(fn, *args, **kwargs) -> float:
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t0


def _scaling(repeats: int, batch: int = 5) -> list[str]:
    """CPU seconds per plan through the sweep path, at one plan shape, by GPU count.

    Rounds interleave the GPU counts (a burst of load on the shared machine hits them
    alike); each sample times ``batch`` plans back to back (a plan takes about a
    millisecond, near the clock's noise); the figure is the median sample per plan."""
    docs = Documents()
    points = {gpus: Point(0, "llama3-8b", "dgx-h100",
                          overrides={"parallelism.tensor": 4, "parallelism.pipeline": 2,
                                     "parallelism.data": gpus // 8,
                                     "training.micro_batch_size": 1,
                                     "training.global_batch_size": 16 * (gpus // 8)},
                          topology_overrides={"tiers.2.size": max(GPU_COUNTS)})
              for gpus in GPU_COUNTS}
    times: dict[int, list[float]] = {gpus: [] for gpus in GPU_COUNTS}
    for round_ in range(repeats + 1):  # the first round is a warm-up
        for gpus, point in points.items():
            t0 = time.process_time()
            for _ in range(batch):
                r = resolve_point(point, docs)
                if not r.valid:
                    raise SystemExit(f"{gpus} GPUs: {r.reason}")
                simulate_task((r.workload, r.topology))
            if round_:
                times[gpus].append((time.process_time() - t0) / batch)
    per = {gpus: statistics.median(ts) for gpus, ts in times.items()}
    rows = [f"| {gpus:,} | {t * 1e3:.1f} ms | {t / per[GPU_COUNTS[0]]:.2f} |"
            for gpus, t in per.items()]
    spread = max(per.values()) / min(per.values())
    rows.append(f"\nMax / min over GPU counts: {spread:.2f} (target: within 1.2).")
    return rows


SEARCHES = (("llama3-70b", 1024, {"training.global_batch_size": 1024}),
            ("mixtral-8x7b", 64, {}))  # dense (issue 16's bar), MoE (router draws per plan)


def _search_line(name: str, gpus: int, overrides: dict, workers: int) -> str:
    """One plan search, wall and CPU seconds (this process and its workers), its counts."""
    wall0, cpu0 = time.perf_counter(), _cpu()
    res = search(name, "dgx-h100", gpus, 10, workers=workers, overrides=overrides)
    wall, cpu = time.perf_counter() - wall0, _cpu() - cpu0
    c = res.counts
    cpu_text = f", {cpu:.1f} s CPU" if cpu > wall / 2 else ""  # forkserver workers: not ours
    return (f"search {name} on {gpus:,} GPUs: {c['plans']} plans, {c['invalid']} invalid, "
            f"{c['over_memory']} over memory, {c['recompute_dominated']} recompute-dominated, "
            f"{c['pruned_by_bound']} pruned by bound, {c['simulated']} simulated, "
            f"{wall:.1f} s wall{cpu_text} on {workers} workers; best "
            f"{res.plans.plan[0]} ({res.plans.recompute[0]}), "
            f"{res.plans.tokens_per_s[0]:.4g} tokens/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-moe", action="store_true")
    ap.add_argument("--no-search", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--repeats", type=int, default=9, help="rounds over the GPU counts")
    ap.add_argument("--write", action="store_true",
                    help="also write its section of reports/benchmarks.md")
    args = ap.parse_args()
    lines: list[str] = []
    say = lines.append
    say(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at start\n")
    pandas_s = _import_pandas()
    say("| sweep | executor | workers | configurations | wall | configs/s | per worker "
        "| per CPU-second |")
    say("|---|---|---|---|---|---|---|---|")
    dense, (n_dense, cpu_dense) = _rates("dense 70B, 1,024 GPUs", DENSE, args.workers)
    lines += dense
    if not args.no_moe:
        lines += _rates("Mixtral 8x7B, 256 GPUs", MOE, args.workers)[0]
    say(f"\nThe rates exclude `import pandas` ({pandas_s:.2f} s CPU, once per process, "
        f"for the first DataFrame of the Python API; the simulator's own import is not "
        f"counted either). With it, the first dense sweep of a fresh process through the "
        f"API: {n_dense / (cpu_dense + pandas_s):.2f} per CPU-second.")
    n_cli, cpu_cli, pandas_cli = _fresh_cli()
    say(f"`clustersim sweep` (CSV, serial) as a fresh process's first sweep, after "
        f"importing the CLI, every lazy import counted (median of 3 processes): "
        f"{n_cli} configurations in {cpu_cli:.2f} s CPU, {n_cli / cpu_cli:.2f} per "
        f"CPU-second; pandas {'loaded' if pandas_cli else 'not loaded'}.")
    if args.profile:
        say("\n| dense: stage | time | share |\n|---|---|---|")
        lines += _profile_dense()
    say("\n| GPUs (Llama 3 8B, TP4 PP2, 16 micro-batches) | CPU per plan | / 8 GPUs |")
    say("|---|---|---|")
    lines += _scaling(args.repeats)
    if not args.no_search:
        say("")
        for name, gpus, overrides in SEARCHES:
            say(_search_line(name, gpus, overrides, args.workers))
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(OUT, "bench_sweep", "## Sweep and search throughput (issue 16)\n\n"
                      "Reproduce with `python benchmarks/bench_sweep.py --profile --write` "
                      "(writes this section).\n\n" + text)


if __name__ == "__main__":
    main()
