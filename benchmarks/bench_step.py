"""Benchmark: wall time of one simulated training step (issue 2's speed target).

Times ``simulate`` on the Llama 3 405B pre-training plan (16,384 H100, TP8 PP16
DP128, seq 8192, GBS 2048, MBS 1) and a few other shipped cases, single
process, first call and warm best of N, and writes its section of ``reports/benchmarks.md``.

    python benchmarks/bench_step.py            # writes its section of reports/benchmarks.md
    python benchmarks/bench_step.py --no-write # print only
    python benchmarks/bench_step.py --engines --no-write   # + the section below
    python benchmarks/bench_step.py --engines --write-startup  # writes it (issue 16)
    python benchmarks/bench_step.py --moe      # MoE workloads beside the dense 405B, print only
    python benchmarks/bench_step.py --long     # long pipelines: fold vs full replay
    python benchmarks/bench_step.py --cases    # every validation case's replay, slowest

``--long``: the longest pipelines among the validation cases (MT-NLG 530B on 35 stages
with 280 to 1,120 micro-batches, the 1T model on 64), CPU time of the direct replay of
one built plan with the long-pipeline fold (:mod:`simulator.engine.periodic`, the
default) and without it (every step replayed), interleaved in one run, and their largest
difference relative to the step time.

``--engines``: every shipped workload in process, CPU time of
``simulate_resolved`` (direct replay, the default path) and of the same step
with the SimPy event loop, interleaved in one run, each also divided by the
import floor (a fresh ``python -c 'import numpy, simpy, pydantic, yaml'``,
CPU time, median of 5, same run) and DeepSeek-V3 over the dense 405B.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from simulator.api import resolve, simulate_resolved
from simulator.engine import NullRecorder, core, run_engine
from simulator.engine.replay import replay_all
from simulator.hardware import Topology
from simulator.memory import estimate_memory
from simulator.metrics import summarize
from simulator.validation.cases import load_cases
from simulator.workload.moe.costs import clear_moe_caches
from simulator.workload.plan import build_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_section import write_section

CASES = [
    ("llama3-405b", "dgx-h100", {}),
    ("llama3-405b-long-context", "dgx-h100", {}),
    ("gpt3-175b", "dgx-h100", {}),
    ("llama3-70b", "dgx-h100", {}),
    ("mixtral-8x7b", "dgx-h100", {}),
    ("deepseek-v3", "dgx-h100", {}),
    ("narayanan2021-t2-530b-560g", "", {}),  # a validation case: MT-NLG 530B, PP35, 1,120 mbs
]
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reports" / "benchmarks.md"
LONG = ["narayanan2021-t2-530b-560g", "narayanan2021-t2-530b-1120g", "narayanan2021-t2-530b-2240g",
        "narayanan2021-t1-1008b"]  # validation case ids: 1F1B, PP35 / PP64, 280-1,120 mbs
SHIPPED = ["llama3-8b", "llama3-70b", "llama3-405b", "llama3-405b-long-context", "gpt3-175b",
           "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3"]


def _step(w, t, engine: str) -> None:
    """``simulate_resolved`` with the replay engine chosen (records discarded, so, as there,
    a plan without op timelines: nothing reads them)."""
    topo = Topology.from_config(t)
    p = build_plan(w, topo, ops=False)
    run = run_engine(p.engine_input, NullRecorder(), engine=engine)
    summarize(p, run, estimate_memory(w, topo, p.partition))


def _cpu_of(fn, *args) -> float:
    """CPU seconds of one call, as a first simulation of its configuration: the MoE router
    tables and per-draw costs a process keeps (for searches) are dropped first."""
    clear_moe_caches()
    t0 = time.process_time()
    fn(*args)
    return time.process_time() - t0


def _floor(repeats: int = 5) -> float:
    """Median CPU seconds of a fresh process importing numpy, simpy, pydantic, yaml."""
    out = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import numpy, simpy, pydantic, yaml"],
                       check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(out)


def engines_section(repeats: int) -> str:
    floor = _floor()
    rows, direct = [], {}
    for name in SHIPPED:
        w, t = resolve(name, "dgx-h100")
        simulate_resolved(w, t)  # warm-up (imports, caches)
        d = sp = float("inf")
        for _ in range(repeats):  # interleaved, so that load and GC hit both alike
            d = min(d, _cpu_of(_step, w, t, "direct"))
            sp = min(sp, _cpu_of(_step, w, t, "simpy"))
        direct[name] = d
        rows.append(f"| {name} | {d * 1e3:.1f} ms | {d / floor:.2f} | {sp * 1e3:.1f} ms "
                    f"| {sp / d:.2f} |")
        print(rows[-1])
    ratio = direct["deepseek-v3"] / direct["llama3-405b"]
    return "\n".join([
        "## In process: one simulated step, direct replay against SimPy (issue 16)", "",
        "Reproduce with `python benchmarks/bench_step.py --engines --write-startup`.", "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end. CPU time of "
        f"`simulate_resolved` on dgx-h100 (plan, replay, memory, metrics; no YAML), best of "
        f"{repeats} after a warm-up; both engines in the same run, interleaved. Import floor "
        f"(fresh process, `import numpy, simpy, pydantic, yaml`, CPU, median of 5, same run): "
        f"{floor * 1e3:.0f} ms.", "",
        "| workload | step (direct replay) | / import floor | step with SimPy replay "
        "| SimPy / direct |",
        "|---|---|---|---|---|", *rows, "",
        f"DeepSeek-V3 / Llama 3 405B (direct): {ratio:.1f}x (target: at most 5x); "
        f"target: every workload <= 100 ms."])


MOE_CASES = [
    ("llama3-405b", {}), ("mixtral-8x7b", {}), ("mixtral-8x22b", {}), ("deepseek-v3", {}),
    ("deepseek-v3", {"model.moe.router_load": "uniform"}),  # what the router draws add
]


def moe_lines(repeats: int) -> list[str]:
    """CPU time of ``simulate_resolved`` for the MoE workloads and the dense 405B, best of
    ``repeats`` after a warm-up, interleaved in one run (issue 16: every workload <= 100 ms,
    DeepSeek-V3 at most 5x the 405B)."""
    cases = [(name, ov, *resolve(name, "dgx-h100", ov)) for name, ov in MOE_CASES]
    best = [float("inf")] * len(cases)
    for _, _, w, t in cases:
        simulate_resolved(w, t)  # warm-up
    for _ in range(repeats):
        for i, (_, _, w, t) in enumerate(cases):
            best[i] = min(best[i], _cpu_of(simulate_resolved, w, t))
    lines = [f"{name + (' (uniform routing)' if ov else ''):36s} {b * 1e3:8.1f} ms CPU"
             for (name, ov, _, _), b in zip(cases, best, strict=True)]
    lines.append(f"deepseek-v3 / llama3-405b: {best[3] / best[0]:.1f}x (target <= 5x)")
    return lines


def _replay_cpu(inp, fold: bool) -> tuple[float, float]:
    """(CPU seconds, step time) of one direct replay, with or without the fold."""
    saved = core.replay
    if not fold:
        core.replay = replay_all
    try:
        t0 = time.process_time()
        step = run_engine(inp, NullRecorder()).step_time
        return time.process_time() - t0, step
    finally:
        core.replay = saved


def long_section(repeats: int) -> str:
    cases = {c.id: c for c in load_cases(categories=["dense_step_time"])}
    rows = []
    for cid in LONG:
        c = cases[cid]
        w, t = resolve(c.spec["workload"], c.topology, c.spec["overrides"],
                       c.topology_overrides)
        inp = build_plan(w, Topology.from_config(t)).engine_input
        steps = sum(len(x) for x in inp.schedule)
        _replay_cpu(inp, True)  # warm-up: compiled structures, the fold's reduced schedules
        _replay_cpu(inp, False)
        fold = full = float("inf")
        for _ in range(repeats):  # interleaved, so that load and GC hit both alike
            cf, step_fold = _replay_cpu(inp, True)
            cu, step_full = _replay_cpu(inp, False)
            fold, full = min(fold, cf), min(full, cu)
        diff = abs(step_fold - step_full) / step_full
        rows.append(f"| {cid} | {len(inp.schedule)} | {inp.fwd.shape[2]} | {steps:,} "
                    f"| {full * 1e3:.1f} ms | {fold * 1e3:.1f} ms | {full / fold:.1f}x "
                    f"| {diff:.1e} |")
        print(rows[-1])
    return "\n".join([
        "## Long pipelines: the fold against the full replay (issue 16)", "",
        "Reproduce with `python benchmarks/bench_step.py --long`. CPU time of the direct "
        f"replay of one built plan, best of {repeats} after a warm-up, both in the same "
        "run, interleaved; last column: |step time difference| / step time.", "",
        "| validation case | stages | micro-batches | steps | full replay | folded "
        "| speed-up | difference |", "|---|---|---|---|---|---|---|---|", *rows])


def _resolve_case(workload: str, topology: str, overrides: dict):
    """A shipped workload on a topology, or (empty topology) a validation case by id."""
    if topology:
        return resolve(workload, topology, overrides)
    c = next(c for c in load_cases(categories=["dense_step_time"]) if c.id == workload)
    return resolve(c.spec["workload"], c.topology, {**c.spec["overrides"], **overrides},
                   c.topology_overrides)


def cases_section(repeats: int, top: int = 8) -> str:
    """Replay CPU time of every validation step case and shipped workload, the slowest."""
    cases = load_cases(categories=["dense_step_time", "moe_step_time"])
    items = [(c.id, c.spec["workload"], c.topology, c.spec["overrides"], c.topology_overrides)
             for c in cases] + [(n, n, "dgx-h100", {}, {}) for n in SHIPPED]
    out = []
    for cid, wl, topo, ov, tov in items:
        w, t = resolve(wl, topo, ov, tov)
        inp = build_plan(w, Topology.from_config(t)).engine_input
        _replay_cpu(inp, True)
        fold = full = float("inf")
        for _ in range(repeats):
            fold = min(fold, _replay_cpu(inp, True)[0])
            full = min(full, _replay_cpu(inp, False)[0])
        out.append((fold, full, cid, sum(len(x) for x in inp.schedule)))
    out.sort(reverse=True)
    rows = [f"| {cid} | {n:,} | {full * 1e3:.1f} ms | {fold * 1e3:.1f} ms |"
            for fold, full, cid, n in out[:top]]
    return "\n".join([
        f"## Replay of every validation step case and shipped workload ({len(out)}), "
        f"the {top} slowest", "",
        "Reproduce with `python benchmarks/bench_step.py --cases`. CPU time of the direct "
        f"replay of one built plan, best of {repeats}; without the fold in the same run.", "",
        "| case | steps | full replay | with the fold |", "|---|---|---|---|", *rows,
        "", f"Slowest with the fold: {out[0][0] * 1e3:.1f} ms ({out[0][2]})."])


_FIRST = """
import json, sys, time
sys.path.insert(0, {bench!r})
from bench_step import _resolve_case
from simulator.api import simulate_resolved
from simulator.workload.moe.costs import clear_moe_caches
w, t = _resolve_case({workload!r}, {topology!r}, {overrides!r})
start = time.perf_counter()
_, _, run = simulate_resolved(w, t)
first = time.perf_counter() - start
best = float("inf")
for _ in range({repeats}):
    clear_moe_caches()  # a first simulation's MoE router tables, drawn afresh
    start = time.perf_counter()
    simulate_resolved(w, t)
    best = min(best, time.perf_counter() - start)
print(json.dumps([first, best, run.events]))
"""


def time_case(workload: str, topology: str, overrides: dict,
              repeats: int) -> tuple[float, float, int]:
    """(first call, warm best of ``repeats``, engine records) of ``simulate_resolved`` in a
    fresh process, after the workload is resolved: the first call pays what a process
    pays once per plan (lazy imports, the run-level variability replay's tables, caches);
    the warm calls are what a search or sweep pays per configuration."""
    code = _FIRST.format(bench=str(Path(__file__).resolve().parent), workload=workload,
                         topology=topology, overrides=overrides, repeats=repeats)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    first, warm, events = json.loads(out.stdout.strip().splitlines()[-1])
    return first, warm, events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--engines", action="store_true", help="direct vs SimPy, every workload")
    ap.add_argument("--moe", action="store_true", help="MoE workloads beside the 405B")
    ap.add_argument("--long", action="store_true", help="long pipelines: fold vs full replay")
    ap.add_argument("--cases", action="store_true",
                    help="replay of every validation step case and shipped workload")
    ap.add_argument("--write-startup", action="store_true",
                    help="write the --engines section of reports/benchmarks.md")
    args = ap.parse_args()
    if args.moe:
        print("\n".join(moe_lines(args.repeats)))
        return
    if args.long:
        print(long_section(args.repeats))
        return
    if args.cases:
        print(cases_section(args.repeats))
        return
    if args.engines:
        text = engines_section(args.repeats)
        print(text)
        if args.write_startup:
            write_section(OUT, "bench_step_engines", text)
        return
    rows = []
    for workload, topo, ov in CASES:
        first, wall, events = time_case(workload, topo, ov, args.repeats)
        topo = topo or "(validation case)"
        rows.append((workload, topo, first, wall, events))
        print(f"{workload:28s} {topo:12s} first {first * 1e3:9.1f} ms  warm {wall * 1e3:9.1f} "
              f"ms  {events:7d} records")
    if args.no_write:
        return
    lines = [
        "## One simulated step (issue 2)",
        "",
        "Regenerate with `python benchmarks/bench_step.py` (one fresh process per case; "
        "wall time of `simulate_resolved`, i.e. plan building, the replay, the run-level "
        "variability and the metrics, excluding imports and YAML parsing). *First call*: "
        "the process's first simulation of the plan, what one `clustersim run` pays; "
        f"*warm*: best of {args.repeats} repeats in the same process, what each "
        "configuration of a search or sweep pays.",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}.",
        "",
        "Target (issue 2): Llama 3 405B on 16,384 H100 (TP8 PP16 DP128, seq 8192, GBS 2048, "
        "MBS 1) under 2 s on one core.",
        "",
        "| workload | topology | first call (ms) | warm (ms) | first / warm "
        "| engine records |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {w} | {t} | {first * 1e3:.1f} | {wall * 1e3:.1f} | {first / wall:.1f} "
              f"| {ev} |" for w, t, first, wall, ev in rows]
    lines += ["", "Records are the intervals the engine emits (phases, p2p sends, gradient "
              "buckets, optimizer); the SimPy event count is of the same order. Cost grows "
              "with stages x micro-batches (and MoE router draws), not with GPU count.", ""]
    write_section(OUT, "bench_step", "\n".join(lines))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
