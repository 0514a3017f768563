"""Plan search: the fastest parallel plans of one model on N GPUs, and why they win.

Cheapest filters first; each step's toll is counted in ``SearchResult.counts``:

1. ``plans``: shapes from the structural rules (:mod:`.candidates`: TP inside
   the NVLink domain, divisors only, even interleaved splits, each pipeline
   under each requested schedule that takes its VP) times the three
   recompute settings (``selective`` is the stack's selective policy: Megatron-Core's
   ``[core_attn]``, torchtitan's per-op SAC);
2. ``invalid``: rejected by ``check_plan`` (heads, batch divisibility, a
   schedule's own rules such as DualPipe's even PP, ...), or a recompute the stack
   cannot run on the model (torchtitan's per-op SAC on MoE or MLA layers);
3. ``over_memory``: the memory model says it does not fit;
   ``recompute_dominated``: a lighter recompute of the same shape fits (more
   recompute only adds work, so it cannot be faster); memory is that of the
   shape's schedule (ZB-H2 and DualPipe hold more activations, DualPipe two
   copies of its parameters), so the fit is decided per (shape, schedule);
4. every plan left gets a lower bound on its step time from its costed phases
   (:mod:`.search_tasks`, no event simulation);
5. branch and bound (:mod:`.branch_bound`): plans are simulated in order of
   their bound, in batches; once the next bound exceeds the K-th best simulated
   step, no plan left can enter the top K, and the rest are ``pruned_by_bound``.
   The top K is then exactly what simulating every fitting plan would give;
6. a hard cap on simulations (``max_simulations``) stops a runaway search;
   ``exhaustive`` is then False and says the ranking covers only what ran.

All plans share the global batch and sequence length, so ranking by tokens/s
is ranking by step time, across schedules too; ties keep generation order.
``schedules`` picks the pipeline schedules (:func:`.candidates.schedule_names`:
default Megatron's 1F1B / interleaved, ``"all"`` every registered one), of them those the
workload's stack runs where its profile says (:func:`stack_schedules`). Two naive baselines are
always simulated when they fit: pure DP (TP1 PP1, MBS 1) and pure TP (the
largest TP the NVLink domain and the model allow, PP1, MBS 1), each with the
lightest recompute that fits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import TopologyConfig, Workload, load_topology
from ..config.loader import apply_overrides, validate_model
from ..config.stacks import run_stack
from ..errors import ConfigError
from ..hardware import usable_hbm_bytes
from ..shape.validate import check_plan
from .branch_bound import Fit, branch_and_bound, rank_fits
from .candidates import (
    NO_PIPELINE,
    RECOMPUTE,
    Shape,
    divisors,
    resolve_shapes,
    schedule_names,
    shapes,
    sharding_names,
    with_recompute,
)
from .executors import Executor
from .explain import why
from .progress import Progress
from .resolve import Documents
from .search_tasks import draw_group, fit_and_bound, fit_and_bound_group
from .store import ResultStore

if TYPE_CHECKING:
    import pandas as pd

MAX_SHAPES = 200_000
PLAN_COLUMNS = ("tp", "pp", "vp", "cp", "ep", "dp", "mbs", "recompute", "sp", "schedule",
                "sharding")


def _refuse_the_workload(base: dict, t: Any, found: list, valid: list, reasons: Any) -> None:
    """Raise the error itself when no candidate is valid and some fail on a field the search
    does not vary: the workload is what is wrong (a LoRA target its model cannot take, say),
    not a plan, and "no plan fits" would hide why."""
    if valid or not found:
        return
    # the plan's fields, and the batch whose divisibility each plan's DP sets
    varied = {*found[0].overrides(), "training.global_batch_size"}
    own = [f for f in reasons if f not in varied and not f.startswith("parallelism.")]
    if not own:
        return
    for shape in found:
        try:
            resolve_shapes(base, t, [shape], raise_errors=True)
        except ConfigError as exc:
            if exc.field == own[0]:
                raise


@dataclass
class SearchResult:
    """Ranked top plans, the baselines, and what each pruning step removed."""

    workload: str
    topology: str
    gpus: int
    global_batch_size: int
    plans: pd.DataFrame
    baselines: list[dict[str, Any]]
    counts: dict[str, int] = field(default_factory=dict)
    exhaustive: bool = True
    elapsed_s: float = 0.0
    overrides: dict[str, Any] = field(default_factory=dict)  # the search's base overrides
    schedules: tuple[str, ...] = ()  # the pipeline schedules searched

    def overrides_for(self, rank: int) -> dict[str, Any]:
        """The workload overrides that reproduce plan ``rank`` (1 = best) with
        :func:`simulator.simulate` on the same workload and topology."""
        rows = self.plans[self.plans["rank"] == rank] if not self.plans.empty else self.plans
        if rows.empty:
            raise ConfigError("rank", rank, f"must be a rank in this result (1..{len(self.plans)})")
        return {**self.overrides, **row_to_overrides(rows.iloc[0].to_dict())}

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "topology": self.topology, "gpus": self.gpus,
                "global_batch_size": self.global_batch_size, "counts": self.counts,
                "exhaustive": self.exhaustive,  # no elapsed_s: the same search, the same bytes
                "schedules": list(self.schedules),
                "plans": self.plans.to_dict("records"),
                "baselines": self.baselines}


def _fit_phase(valid: list[tuple[Shape, Workload]], t: TopologyConfig, ex: Executor,
               counts: dict[str, int], progress: Progress | None
               ) -> tuple[list[Fit], dict[Shape, str]]:
    """Memory and bound for every valid shape; returns fits and why the others failed."""
    fits, failed = [], {}
    items = [(w, t) for _, w in valid]
    results: list[Any] = [None] * len(items)
    for idx, res in _map_grouped(items, ex):
        for i, r in zip(idx, res, strict=True):
            results[i] = r
        if progress is not None:
            progress.update(len(idx))
    for i, (rc, tried, bound, error) in enumerate(results):
        shape, w = valid[i]
        skipped = sum(math.isnan(g) for g in tried)  # recompute the stack cannot run here
        if error is not None:
            counts["invalid"] += 3
            failed[shape] = error
        elif rc is None:
            counts["invalid"] += skipped
            counts["over_memory"] += 3 - skipped
            cap = usable_hbm_bytes(t.gpu.hbm_GB, t.gpu.hbm_usable_MiB) / 1e9
            head = w.training.memory_headroom_GB
            failed[shape] = (f"does not fit even with full recompute: {tried[-1]:.1f} GB "
                             f"of {cap:.4g} GB" + (f" less {head:g} GB headroom" if head else ""))
        else:
            k = RECOMPUTE.index(rc)
            lighter = tried[:k]
            counts["invalid"] += sum(math.isnan(g) for g in lighter)
            counts["over_memory"] += sum(not math.isnan(g) for g in lighter)
            counts["recompute_dominated"] += len(RECOMPUTE) - 1 - k
            fits.append(Fit(i, shape, with_recompute(w, rc), rc, tried[-1], bound))
    return fits, failed


def _map_grouped(items: list[tuple[Workload, TopologyConfig]], ex: Executor
                 ) -> Iterator[tuple[list[int], list[Any]]]:
    """``fit_and_bound`` of every item: (item indices, their results) per task. MoE plans
    that read the same router draws (:func:`.search_tasks.draw_group`) go in one task, so
    one worker draws and prices them (per plan, they cost the same wherever they run)."""
    groups: dict[tuple, list[int]] = {}
    for i, (w, _) in enumerate(items):
        key = draw_group(w)
        groups.setdefault(key if key else (i,), []).append(i)
    if len(groups) == len(items):  # dense: one plan a task, as the executor chunks them
        for i, res in ex.map(fit_and_bound, items):
            yield [i], [res]
        return
    idx = sorted(groups.values(), key=len, reverse=True)  # largest first: no long tail
    for g, res in ex.map(fit_and_bound_group, [[items[i] for i in ix] for ix in idx]):
        yield idx[g], res


def row_to_overrides(row: dict[str, Any]) -> dict[str, Any]:
    """Dotted-path overrides for the plan of one search row (a ``plans`` record).

    With the search's own base overrides (:meth:`SearchResult.overrides_for` adds
    them) they make :func:`simulator.simulate` reproduce the row.
    """
    shape = Shape(int(row["tp"]), int(row["pp"]), int(row["vp"]), int(row["cp"]),
                  int(row["ep"]), int(row["dp"]), int(row["mbs"]), bool(row["sp"]),
                  str(row["schedule"]), str(row.get("sharding") or ""))
    return {**shape.overrides(), "training.recompute": str(row["recompute"])}


def _row(rank: int, f: Fit) -> dict[str, Any]:
    s, o = f.shape, f.outcome
    row: dict[str, Any] = {"rank": rank, "plan": s.label(), "tp": s.tp, "pp": s.pp, "vp": s.vp,
                           "cp": s.cp, "ep": s.ep, "dp": s.dp, "mbs": s.mbs,
                           "recompute": f.recompute, "sp": s.sp, "schedule": s.schedule,
                           "sharding": s.sharding}
    for k in ("tokens_per_s", "step_time_s", "step_time_ideal_s", "mfu", "hfu",
              "model_tflops_per_gpu", "bubble_fraction", "memory_per_gpu_GB",
              "memory_margin_GB"):
        row[k] = o.get(k, float("nan"))  # a store written before a metric existed lacks it
    row.update({k: v for k, v in o.items() if k.startswith("breakdown_s.")})
    row["bound_s"] = f.bound_s
    row["config_key"] = o["config_key"]
    return row


def baseline_shapes(w: Workload, t: TopologyConfig, gpus: int, sharding: str = ""
                    ) -> dict[str, Shape]:
    """Pure DP and pure TP on ``gpus`` GPUs (see the module docstring), with the first
    data-parallel layout the search tries."""
    m = w.model
    tps = [d for d in divisors(gpus) if d <= t.tiers[0].size and not
           (m.num_attention_heads % d or m.groups % d or m.ffn % d)]
    tp = max(tps)
    return {"pure DP": Shape(1, 1, 1, 1, 1, gpus, 1, False, NO_PIPELINE, sharding),
            "pure TP": Shape(tp, 1, 1, 1, 1, gpus // tp, 1, tp > 1, NO_PIPELINE, sharding)}


def _baselines(named: dict[str, Shape], by_shape: dict[Shape, Fit], failed: dict[Shape, str],
               base: dict, t: TopologyConfig, ranked: list[Fit]) -> list[dict[str, Any]]:
    out = []
    for name, shape in named.items():
        entry: dict[str, Any] = {"name": name, "plan": shape.label()}
        f = by_shape.get(shape)
        if f is not None and f.outcome is not None and f.outcome["status"] in ("ok", "over_memory"):
            entry.update(status=f.outcome["status"], recompute=f.recompute, **{
                k: f.outcome[k] for k in ("tokens_per_s", "step_time_s", "mfu",
                                          "memory_per_gpu_GB")})
            entry["rank"] = next((i + 1 for i, g in enumerate(ranked) if g is f), None)
            if ranked and ranked[0] is not f:
                entry["why_best_wins"] = why(_row(1, ranked[0]), _row(0, f), name)
        else:
            entry.update(status="not run", reason=failed.get(shape) or _reason(shape, base, t))
        out.append(entry)
    return out


def _reason(shape: Shape, base: dict, t: TopologyConfig) -> str:
    try:
        check_plan(validate_model(Workload, apply_overrides(base, shape.overrides()), {}, ""), t)
    except ConfigError as exc:
        return exc.message()
    return "not simulated"


def stack_schedules(w: Workload, names: tuple[str, ...], default: bool) -> tuple[str, ...]:
    """Of ``names``, the schedules the workload's stack runs (stacks/*.yaml
    ``pipeline.schedules``; all where it does not say). Asked for (not the ``default``),
    none of them is a ConfigError naming ``--schedules``; by default, the stack's own."""
    runs = run_stack(w.training).pipeline_schedules
    if runs is None:
        return names
    kept = tuple(n for n in names if n in runs)
    if kept:
        return kept
    if default:
        return tuple(runs)
    raise ConfigError("--schedules", ",".join(names),
                      f"{' or '.join(runs)}: stack {w.training.stack}'s pipeline runtime runs "
                      f"no other (stacks/{w.training.stack}.yaml pipeline.schedules)")


def stack_context_algo(w: Workload, given: dict) -> str | None:
    """The context-parallel algorithm the search's CP candidates must run where the
    workload's stack lacks the one it names by default (stacks/*.yaml
    ``context_parallel.algorithms``: the stack's first); None where it has it, or where the
    run sets one itself (its CP candidates are then refused by :func:`check_plan`)."""
    has = run_stack(w.training).cp_algorithms
    if has is None or w.parallelism.context_parallel_algo in has \
            or "parallelism.context_parallel_algo" in given:
        return None
    return has[0]


def search_plans(workload: Any, topology: Any, gpus: int, top: int = 10, *,
                 overrides: dict | None = None, topology_overrides: dict | None = None,
                 micro_batch_sizes: tuple[int, ...] = (1, 2, 4, 8), max_context: int = 16,
                 max_simulations: int = 2000, schedules: str | Sequence[str] | None = None,
                 sharding: str | Sequence[str] | None = None,
                 executor: Executor | None = None, store: ResultStore | None = None,
                 progress: bool | None = False, sp_only: bool = False) -> SearchResult:
    """Rank every plan of ``workload`` on ``gpus`` GPUs of ``topology`` (module docstring).
    ``sp_only``: TP > 1 plans only with sequence parallelism (the capacity planner's
    narrower space, :mod:`simulator.capacity`)."""
    start = time.monotonic()
    if isinstance(workload, Workload):
        workload = workload.model_dump()
    data, lines, source = Documents().get(workload, "workloads")
    given = {k.replace("__", "."): v for k, v in (overrides or {}).items()}
    base = apply_overrides(data, given)
    w = validate_model(Workload, base, lines, source)
    algo = stack_context_algo(w, given)
    if algo is not None:  # the CP candidates run the stack's own algorithm
        given["parallelism.context_parallel_algo"] = algo
        base = apply_overrides(data, given)
        w = validate_model(Workload, base, lines, source)
    t = load_topology(topology, topology_overrides)
    for name, value in (("--top", top), ("--max-context", max_context),
                        ("--max-simulations", max_simulations)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(name, value, "must be an integer >= 1")
    if gpus < 1 or gpus > t.max_gpus:
        raise ConfigError("--gpus", gpus, f"must be between 1 and the topology's {t.max_gpus}")
    names = stack_schedules(w, schedule_names(schedules), schedules is None)
    layouts = sharding_names(sharding)
    found = shapes(w, t, gpus, tuple(micro_batch_sizes), max_context, names, layouts,
                   sp_only)
    if len(found) > MAX_SHAPES:
        raise ConfigError("--gpus", gpus, f"gives {len(found)} plan shapes, over the cap of "
                          f"{MAX_SHAPES}; narrow --micro-batch-sizes or --max-context")
    valid, reasons = resolve_shapes(base, t, found)
    _refuse_the_workload(base, t, found, valid, reasons)
    counts = {"plans": 3 * len(found), "invalid": 3 * sum(reasons.values()), "over_memory": 0,
              "recompute_dominated": 0, "pruned_by_bound": 0, "not_simulated_cap": 0,
              "simulated": 0}
    ex = executor or Executor()
    with Progress(len(valid), "memory+bound", enabled=progress) as bar:
        fits, failed = _fit_phase(valid, t, ex, counts, bar)
    by_shape = {f.shape: f for f in fits}
    named = baseline_shapes(w, t, gpus, layouts[0])
    forced = [by_shape[s] for s in named.values() if s in by_shape]
    with Progress(min(len(fits), max_simulations), "simulating", enabled=progress) as bar:
        pruned, capped = branch_and_bound(fits, forced, top, max_simulations, t, ex, store,
                                           bar)
        bar.total = bar.done
    counts["pruned_by_bound"], counts["not_simulated_cap"] = pruned, capped
    counts["simulated"] = sum(f.outcome is not None for f in fits)
    ranked = rank_fits(fits)
    rows = [_row(i + 1, f) for i, f in enumerate(ranked[:top])]
    for i, row in enumerate(rows):
        nxt = ranked[i + 1] if i + 1 < len(ranked) else None
        row["why"] = why(row, _row(i + 2, nxt), f"#{i + 2}") if nxt is not None else ""
    import pandas as pd  # heavy (~0.5 s): loaded for the result table, not on `import simulator`

    return SearchResult(workload=w.model.name, topology=t.name, gpus=gpus,
                        global_batch_size=w.training.global_batch_size,
                        plans=pd.DataFrame(rows),
                        baselines=_baselines(named, by_shape, failed, base, t, ranked),
                        counts=counts, exhaustive=capped == 0,
                        elapsed_s=time.monotonic() - start, overrides=given,
                        schedules=names)
