"""Capacity planning: which GPU, how many, which plan, how long and at what cost.

For every (topology, GPU count) of a grid, :func:`capacity` searches the parallel plans
(:func:`simulator.sweep.search_plans`, memory headroom kept), takes the fastest that fits,
runs time-to-train on it (failures, checkpoints, goodput, energy with the fabric's power)
and prices the network's bill of materials (:mod:`.bom`). One row per cell, rows without a
plan kept and marked; ``meets_deadline``, ``within_budget`` and ``on_frontier`` (the
cost-time Pareto frontier, :mod:`.frontier`) mark the rest.

>>> from simulator import capacity
>>> df = capacity("tiny", 1e9, ["dgx-h100"], [8, 16], prices={"dgx-h100": 2.0},
...               executor="serial")
>>> df[["topology", "num_gpus", "status"]].values.tolist()
[['dgx-h100', 8, 'ok'], ['dgx-h100', 16, 'ok']]
>>> bool((df.cost_usd == df.gpu_hours * 2.0).all())
True
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..sweep.executors import Executor, make_executor
from ..sweep.progress import Progress
from ..sweep.store import ResultStore
from .cell import evaluate_grid
from .frontier import apply_prices, mark_frontier, mark_limits, parse_prices
from .scaling import CHINCHILLA_TOKENS_PER_PARAM, model_rows

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["capacity", "summary_line"]

# The capacity search's plan space: micro-batches 1 and 2 (the full search's 4 and 8 never
# won a shipped Llama 3 cell on dgx-h100 / gb200-nvl72 at 256-4096 GPUs, and they cost a
# third of the search); everything else as `clustersim search`.
MICRO_BATCH_SIZES = (1, 2)


def capacity(workload: Any, tokens: float | None, topologies: Sequence[str] | str,
             gpus: Sequence[int] | int, *, prices: dict[str, float] | str | None = None,
             deadline_days: float | None = None, budget_usd: float | None = None,
             overrides: dict[str, Any] | None = None,
             model_sizes: Sequence[str] | None = None,
             executor: str | Executor | None = None, progress: bool | None = False,
             scheduler: Any = None, workers: int | None = None,
             store: str | Path | None = None, switch_price: float | None = None,
             transceiver_price: float | None = None,
             micro_batch_sizes: Sequence[int] = MICRO_BATCH_SIZES, max_context: int = 16,
             max_simulations: int = 2000, schedules: str | Sequence[str] | None = None,
             mc_runs: int = 200,
             tokens_per_param: float = CHINCHILLA_TOKENS_PER_PARAM) -> pd.DataFrame:
    """One row per (topology, GPU count) (per model size too, with ``model_sizes``).

    Args:
        workload: as :func:`simulator.simulate` (ignored when ``model_sizes`` is given).
        tokens: tokens to train on; ``None`` with ``model_sizes``: each size's
            compute-optimal tokens, ``tokens_per_param`` per parameter (:mod:`.scaling`).
        model_sizes: dense workloads of one family (e.g. ``["llama3-8b", "llama3-70b"]``),
            an axis: one row per (model, topology, GPU count), with ``model`` and
            ``parameters`` columns.
        topologies, gpus: the grid (lists, or comma-separated strings / one value).
        prices: USD per GPU-hour by topology (``{"dgx-h100": 2.5}`` or
            ``"dgx-h100=2.5,..."``); a topology without one has no cost.
        deadline_days, budget_usd: mark ``meets_deadline`` / ``within_budget``.
        overrides: base workload overrides (dotted paths), searched around.
        executor, scheduler, workers, store, progress: as :func:`simulator.sweep`; the
            store keeps each finished cell, so a killed run started again redoes none.
        switch_price, transceiver_price: USD per scale-out switch and transceiver
            (both, or neither): adds ``network_capex_usd`` to the cost.

    ``df.attrs``: ``frontier_axes`` (the two columns the frontier minimises) and
    ``summary`` (one line on the deadline and budget).
    """
    topos = _names(topologies)
    counts = _counts(gpus)
    price = parse_prices(prices, topos)
    _check(tokens, model_sizes, deadline_days, budget_usd, price, topos, switch_price,
           transceiver_price)
    options = {"overrides": dict(overrides or {}), "micro_batch_sizes": list(micro_batch_sizes),
               "max_context": max_context, "max_simulations": max_simulations,
               "schedules": schedules, "mc_runs": mc_runs}
    jobs = model_rows(workload, tokens, model_sizes, tokens_per_param)
    ex = executor if isinstance(executor, Executor) else make_executor(
        executor or "local", scheduler, workers)
    st = ResultStore(store) if store is not None else None
    grid = [(job, topo, n) for job in jobs for topo in topos for n in counts]
    try:
        with Progress(2 * len(grid), "capacity", enabled=progress) as bar:
            found = evaluate_grid([(job[1], topo, n, job[2]) for job, topo, n in grid],
                                  options, ex, st, bar)
    finally:
        if st is not None:
            st.close()
        if ex is not executor:
            ex.close()
    rows = [{**({"model": model, "parameters": params} if model else {}),
             "tokens": n_tokens, **row}
            for ((model, _, n_tokens, params), _, _), row in zip(grid, found, strict=True)]
    return _table(rows, price, deadline_days, budget_usd, switch_price, transceiver_price)


def _table(rows: list[dict[str, Any]], price: dict[str, float], deadline: float | None,
           budget: float | None, switch_price: float | None,
           transceiver_price: float | None) -> pd.DataFrame:
    import pandas as pd

    apply_prices(rows, price, switch_price, transceiver_price)
    mark_limits(rows, deadline, budget)
    axis = mark_frontier(rows)
    df = pd.DataFrame(rows)
    df.attrs["frontier_axes"] = ["days", axis]
    df.attrs["summary"] = summary_line(rows, deadline, budget)
    return df


def summary_line(rows: list[dict[str, Any]], deadline: float | None,
                 budget: float | None) -> str:
    """One line: how many rows meet the deadline and budget, or that none does."""
    ok = [r for r in rows if r["status"] == "ok"]
    parts = [f"{len(ok)} of {len(rows)} cells have a plan that fits"]
    both = [r for r in ok if r["meets_deadline"] is not False and r["within_budget"]
            is not False]
    limits = " and ".join(x for x, v in (("the deadline", deadline), ("the budget", budget))
                          if v is not None)
    if limits and not both:
        parts.append(f"no row meets {limits}"
                     + (f" ({deadline:g} days)" if deadline is not None else "")
                     + (f" (USD {budget:,.0f})" if budget is not None else ""))
    elif limits:
        parts.append(f"{len(both)} meet {limits}")
    sized = [r for r in both if r.get("parameters")]
    if sized and limits:
        r = min(sized, key=lambda r: (-r["parameters"], r["days"]))
        parts.append(f"largest model that meets {limits}: {r['model']} "
                     f"({r['parameters'] / 1e9:.1f}B parameters, {r['tokens']:.3g} tokens) "
                     f"on {r['num_gpus']} GPUs of {r['topology']}, {r['days']:.1f} days")
    return "; ".join(parts)


def _names(value: Sequence[str] | str) -> list[str]:
    names = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not names:
        raise ConfigError("--topology", value, "one or more topology names")
    return names


def _counts(value: Sequence[int] | int | str) -> list[int]:
    items = value.split(",") if isinstance(value, str) else (
        [value] if isinstance(value, int) else list(value))
    # whole numbers only: an empty entry (8,,16), 8.5 or True is a mistake, not a count
    out = [int(x.strip()) if isinstance(x, str) and x.strip().isdigit() else
           int(x) if isinstance(x, numbers.Integral) and not isinstance(x, bool) else None
           for x in items]
    if not out or None in out or min(out) < 1:
        raise ConfigError("--gpus", value, "positive GPU counts separated by single commas, "
                          "e.g. 256,1024")
    return list(dict.fromkeys(out))


def _check(tokens: float | None, model_sizes: Any, deadline: float | None,
           budget: float | None, price: dict[str, float], topos: list[str],
           switch_price: float | None, transceiver_price: float | None) -> None:
    if tokens is None and not model_sizes:
        raise ConfigError("--tokens", None, "a number > 0 (or --model-sizes for "
                          "compute-optimal tokens)")
    if tokens is not None and not (isinstance(tokens, int | float) and math.isfinite(tokens)
                                   and tokens > 0):
        raise ConfigError("--tokens", tokens, "a finite number > 0 (e.g. 2e12)")
    for name, v in (("--deadline-days", deadline), ("--budget", budget),
                    ("--switch-price", switch_price),
                    ("--transceiver-price", transceiver_price)):
        if v is not None and not (isinstance(v, int | float) and not isinstance(v, bool)
                                  and math.isfinite(v) and v > 0):
            raise ConfigError(name, v, "a finite number > 0")
    if budget is not None and set(price) != set(topos):
        missing = [t for t in topos if t not in price]
        raise ConfigError("--budget", budget, "needs a --price for every topology; none for "
                          + ", ".join(missing))
    if (switch_price is None) != (transceiver_price is None):
        raise ConfigError("--switch-price", switch_price,
                          "given together with --transceiver-price (both or neither)")
