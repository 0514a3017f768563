"""One (topology, GPU count) of a capacity grid: its best plan, run and fabric.

The plan comes from :func:`simulator.sweep.search_plans` (rank 1: the fastest plan that
fits in memory, the workload's ``training.memory_headroom_GB`` kept free); the step and its
cross-validated interval from :func:`simulator.simulate` on that plan's overrides (what
``clustersim run --set ...`` prints); days, GPU-hours, goodput and energy from
:func:`simulator.time_to_train` with the fabric's power from the bill of materials
(:mod:`.bom`) in place of the topology's per-GPU network estimate where the fabric is
described. Prices are applied later (:mod:`.frontier`), so a stored cell serves any price.
A grid runs in two phases: the searches one after another (each spread over the executor),
then every winner's run and time-to-train together on the executor.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..api import simulate
from ..config import load_topology
from ..errors import ConfigError
from ..reliability.run import time_to_train
from ..sweep.executors import Executor
from ..sweep.progress import Progress
from ..sweep.search import search_plans
from ..sweep.store import ResultStore
from ..version import __version__
from .bom import bill_of_materials, bom_columns


def _flag(key: str, value: Any) -> str:
    text = "null" if value is None else json.dumps(value) if isinstance(value, bool) else value
    return f"--set {key}={text}"


def set_flags(overrides: dict[str, Any]) -> str:
    """``--set k=v`` flags that reproduce ``overrides`` on the command line."""
    return " ".join(_flag(k, v) for k, v in overrides.items())


def cell_key(workload: Any, topology: str, gpus: int, tokens: float,
             options: dict[str, Any]) -> str:
    """Store key of one cell: every input of the search and the run, and the version."""
    text = json.dumps({"kind": "capacity", "workload": workload, "topology": topology,
                       "gpus": gpus, "tokens": tokens, "options": options,
                       "version": __version__}, sort_keys=True, default=str)
    return "capacity:" + hashlib.sha256(text.encode()).hexdigest()


def _no_plan(topology: str, gpus: int, reason: str) -> dict[str, Any]:
    return {"topology": topology, "num_gpus": gpus, "status": "no_plan", "reason": reason}


def evaluate_grid(cells: list[tuple[Any, str, int, float]], options: dict[str, Any],
                  executor: Executor, store: ResultStore | None,
                  progress: Progress | None = None) -> list[dict[str, Any]]:
    """Rows of ``cells`` ((workload, topology, GPUs, tokens) each), in order.

    Cells in the store are read back; the others are searched one after another (each
    search spreads its plans over ``executor``), then their winners' runs and
    time-to-trains go to ``executor`` together, each row stored as it arrives. Progress:
    two ticks a cell (search, run)."""
    keys = [cell_key(w, t, n, tok, options) for w, t, n, tok in cells]
    stored = store.get_many(keys) if store is not None else {}
    rows: list[dict[str, Any] | None] = [
        json.loads(stored[k]) if k in stored else None for k in keys]
    if progress is not None:
        progress.skip(2 * sum(r is not None for r in rows))
    todo: list[int] = []
    for i, (w, t, n, _) in enumerate(cells):
        if rows[i] is not None:
            continue
        rows[i] = search_cell(w, t, n, options, executor, store)
        if progress is not None:
            progress.update(2 if rows[i]["status"] != "ok" else 1)
        if rows[i]["status"] == "ok":
            todo.append(i)
        elif store is not None:
            store.put(keys[i], rows[i]["status"], json.dumps(rows[i]))
    items = [(cells[i][0], rows[i], cells[i][3], options["mc_runs"]) for i in todo]
    for j, row in executor.map(finish_cell, items) if items else ():
        rows[todo[j]] = row
        if store is not None:
            store.put(keys[todo[j]], row["status"], json.dumps(row))
        if progress is not None:
            progress.update()
    return [r for r in rows if r is not None]


def search_cell(workload: Any, topology: str, gpus: int, options: dict[str, Any],
                executor: Executor, store: ResultStore | None) -> dict[str, Any]:
    """The fastest plan that fits and the fabric: a partial row (``finish_cell`` ends it)
    or the row of a cell without a plan."""
    base = dict(options.get("overrides") or {})
    try:
        found = search_plans(workload, topology, gpus, 1, overrides=base,
                             micro_batch_sizes=tuple(options["micro_batch_sizes"]),
                             max_context=options["max_context"],
                             max_simulations=options["max_simulations"],
                             schedules=options.get("schedules"), executor=executor,
                             store=store, progress=False,
                             sp_only=options.get("sp_only", True))
    except ConfigError as exc:
        if exc.field == "--gpus":
            return _no_plan(topology, gpus, exc.message())
        raise
    if found.plans.empty:
        c = found.counts
        return _no_plan(topology, gpus, f"no plan fits: of {c['plans']} plans, "
                        f"{c['invalid']} invalid and {c['over_memory']} over memory")
    overrides = found.overrides_for(1)
    best = found.plans.iloc[0]
    bom = bill_of_materials(load_topology(topology), gpus)
    return {
        "topology": topology, "num_gpus": gpus, "status": "ok", "reason": "",
        "plan": str(best["plan"]), "schedule": str(best["schedule"]),
        "recompute": str(best["recompute"]), "set_flags": set_flags(overrides),
        "overrides": overrides, "memory_headroom_GB": float(best["memory_margin_GB"]),
        "network_W": bom.network_W, **bom_columns(bom),
        "search_exhaustive": bool(found.exhaustive),
        "plans_simulated": int(found.counts["simulated"]),
    }


def finish_cell(item: tuple[Any, dict[str, Any], float, int]) -> dict[str, Any]:
    """A searched cell's row: the plan's step and interval (as ``clustersim run``), its
    time-to-train with the fabric's power, in column order. Runs in a worker."""
    workload, part, tokens, mc_runs = item
    row = dict(part)
    topology, gpus, overrides = row["topology"], row["num_gpus"], row["overrides"]
    network_W = row.pop("network_W")
    topo_over = {"power.network_W_per_gpu": network_W / gpus} if network_W is not None else {}
    result = simulate(workload, topology, overrides)
    run = time_to_train(workload, topology, tokens, overrides, topo_over, mc_runs=mc_runs)
    iv = result.step_time_interval_s or {}
    head = {k: row.pop(k) for k in ("topology", "num_gpus", "status", "reason", "plan",
                                    "schedule", "recompute", "set_flags", "overrides")}
    return {
        **head,
        "step_time_s": result.step_time_s, "step_time_low_s": iv.get("low"),
        "step_time_high_s": iv.get("high"), "tokens_per_s": result.tokens_per_s,
        "mfu": result.mfu, "days": run.days, "days_p10": run.monte_carlo["days_p10"],
        "days_p90": run.monte_carlo["days_p90"], "gpu_hours": run.gpu_hours,
        "energy_MWh": run.energy_MWh, "goodput": run.goodput,
        "interruptions": run.interruptions, "memory_per_gpu_GB": result.memory_per_gpu_GB,
        "memory_headroom_GB": row.pop("memory_headroom_GB"),
        "network_power_from": "bom" if topo_over else "topology power.network_W_per_gpu",
        **row,
    }
