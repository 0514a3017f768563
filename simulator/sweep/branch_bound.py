"""Branch and bound: simulate the fewest plans that still give the exact top K.

Every plan that fits comes with a lower bound on its step time (:class:`Fit`,
``bound_s``: its costed phases without the event simulation,
:mod:`.search_tasks`). Plans are simulated in order of their bound, in batches of
``max(8, 2 x workers)`` (so a pool stays busy). Before each batch the K-th best
simulated step so far is the bar: once the next bound exceeds it, that plan and every
plan after it are slower than K plans already simulated (a bound never exceeds its
plan's step), so none can enter the top K and they are pruned. The top K is then
exactly what simulating every fitting plan would give; ties keep generation order.

The baselines (``forced``) are simulated first, whatever their bound. A hard cap on
simulations stops a runaway search: the plans left unsimulated by the cap although
their bound could have entered the top are counted apart, and the ranking then
covers only what ran.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..config import TopologyConfig, Workload
from .candidates import Shape
from .executors import Executor
from .progress import Progress
from .resolve import config_key
from .runner import simulate_keys
from .store import ResultStore


@dataclass
class Fit:
    """A shape with the lightest recompute that fits, its memory and step bound."""

    order: int
    shape: Shape
    workload: Workload
    recompute: str
    memory_GB: float
    bound_s: float
    outcome: dict[str, Any] | None = None


def simulate_batch(batch: list[Fit], t: TopologyConfig, ex: Executor,
                   store: ResultStore | None, progress: Progress | None) -> None:
    """Simulate ``batch`` (through the store) and keep each plan's outcome on its Fit."""
    keys = [config_key(f.workload, t) for f in batch]
    outcomes, _ = simulate_keys({k: (f.workload, t) for k, f in zip(keys, batch, strict=True)},
                                ex, store, progress)
    for k, f in zip(keys, batch, strict=True):
        f.outcome = {**json.loads(outcomes[k]), "config_key": k}


def rank_fits(fits: list[Fit]) -> list[Fit]:
    """The simulated plans that ran and fit, fastest first; ties keep generation order."""
    done = [f for f in fits if f.outcome is not None and f.outcome["status"] == "ok"
            and f.outcome["fits_in_memory"]]
    return sorted(done, key=lambda f: (-f.outcome["tokens_per_s"], f.order))


def branch_and_bound(fits: list[Fit], forced: list[Fit], top: int, cap: int,
                     t: TopologyConfig, ex: Executor, store: ResultStore | None,
                     progress: Progress | None) -> tuple[int, int]:
    """Simulate in bound order until no plan left can enter the top.

    Returns (pruned by the bound, left unsimulated by the cap although they could
    have entered the top).
    """
    simulate_batch(forced[:cap], t, ex, store, progress)
    order = sorted(fits, key=lambda f: (f.bound_s, f.order))
    batch_size = max(8, 2 * ex.workers)
    pos, simulated = 0, sum(f.outcome is not None for f in fits)
    while pos < len(order) and simulated < cap:
        ranked = rank_fits(fits)
        kth = ranked[top - 1].outcome["step_time_s"] if len(ranked) >= top else float("inf")
        batch: list[Fit] = []
        while pos < len(order) and len(batch) < min(batch_size, cap - simulated):
            if order[pos].bound_s > kth:
                break
            if order[pos].outcome is None:
                batch.append(order[pos])
            pos += 1
        if not batch:
            break
        simulate_batch(batch, t, ex, store, progress)
        simulated += len(batch)
    left = [f for f in order[pos:] if f.outcome is None]
    ranked = rank_fits(fits)
    kth = ranked[top - 1].outcome["step_time_s"] if len(ranked) >= top else float("inf")
    capped = sum(f.bound_s <= kth for f in left)
    return len(left) - capped, capped
