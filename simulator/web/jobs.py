"""Long calls from the page (plan search, capacity), each in its own process, cancellable.

A job is started by ``POST /api/jobs`` and known only by its random id (no listing, so
one user cannot see another's). Its process reports ``(label, done, total)`` progress on
a pipe; ``DELETE`` kills it; so does its time budget. At most ``max_running`` jobs run at
once; finished ones are kept ``keep_s`` seconds for their owner to read, then dropped.

Search runs :func:`simulator.search` with an executor that counts what it maps (the
progress bar); capacity calls :func:`simulator.capacity` (``workload, tokens, topologies,
gpus, *, prices, deadline_days, budget_usd, overrides, progress=False``), which has no
progress of its own (the page shows activity).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..capacity import capacity
from ..errors import ConfigError
from ..sweep import search
from ..sweep.executors import Executor
from .compute import _clean, _int, _refs
from .inputs import check_overrides, is_text, resolve_request, shipped_path

Report = Callable[[str, int, int], None]


class _Counting(Executor):
    """Runs in this process, like the serial executor, reporting each item mapped."""

    def __init__(self, report: Report):
        self.report, self.phase = report, 0

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[tuple[int, Any]]:
        self.phase += 1
        label = "checking memory and bounds" if self.phase == 1 else "simulating"
        self.report(label, 0, len(items))
        for i, item in enumerate(items):
            yield i, fn(item)
            self.report(label, i + 1, len(items))


def search_job(body: dict, report: Report) -> dict[str, Any]:
    """The fastest plans on ``gpus`` GPUs; each row with the overrides that load it."""
    w, t, ov, tov = _refs(body)
    gpus = _int(body, "gpus", 64, 1, 1_000_000)
    top = _int(body, "top", 10, 1, 50)
    cap = _int(body, "max_simulations", 200, 1, 2000)
    res = search(w, t, gpus, top, overrides=ov, topology_overrides=tov,
                           max_simulations=cap, executor=_Counting(report), progress=False)
    rows = res.plans.to_dict("records")
    for row in rows:
        row["overrides"] = res.overrides_for(int(row["rank"]))
    keep = ("rank", "plan", "tokens_per_s", "step_time_s", "mfu", "memory_per_gpu_GB",
            "recompute", "schedule", "why")
    return _clean({"columns": list(keep), "rows": [{k: r.get(k) for k in (*keep, "overrides")}
                                                    for r in rows],
                   "counts": res.counts, "exhaustive": res.exhaustive})


def capacity_job(body: dict, report: Report) -> dict[str, Any]:
    """``simulator.capacity`` behind the page: the frontier of topologies x GPU counts."""
    names = body.get("topologies")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError("topologies", names, "must be a list of shipped topology names")
    for name in names:  # every pair validated first, with the CLI's messages
        shipped_path("topology", name)
        resolve_request({**body, "topology": name})
    text = is_text(body["workload"])
    w = resolve_request({**body, "topology": names[0]})[0].model_dump() if text \
        else body["workload"]
    ov = {} if text else check_overrides("overrides", body.get("overrides"))
    tokens = body.get("tokens")
    if not isinstance(tokens, int | float) or isinstance(tokens, bool) or not tokens > 0:
        raise ConfigError("tokens", tokens, "must be a number of training tokens > 0")
    gpus = body.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(
            isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in gpus):
        raise ConfigError("gpus", gpus, "must be a list of GPU counts > 0")
    opts = {k: body.get(k) for k in ("deadline_days", "budget_usd")}
    for k, v in opts.items():
        if v is not None and (not isinstance(v, int | float) or isinstance(v, bool) or v <= 0):
            raise ConfigError(k, v, "must be a number > 0 or empty")
    prices = body.get("prices")
    if prices is not None and not (isinstance(prices, dict) and all(
            isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            for v in prices.values())):
        raise ConfigError("prices", prices, "must map topology names to USD per GPU-hour > 0")
    report("planning", 0, 0)
    frame = capacity(w, float(tokens), names, gpus, prices=prices,
               overrides=ov or None, progress=False, **opts)
    rows = frame.to_dict("records")
    cols = [c for c in frame.columns if c != "overrides"]
    return _clean({"columns": cols, "rows": rows})


JOBS: dict[str, Callable[[dict, Report], dict]] = {"search": search_job,
                                                    "capacity": capacity_job}


def job_main(kind: str, body: dict, conn: Any) -> None:
    """A job process: progress messages, then ``("done", result)`` or ``("error", {...})``."""
    try:
        out = JOBS[kind](body, lambda label, done, total: conn.send(
            ("progress", {"label": label, "done": done, "total": total})))
        conn.send(("done", out))
    except ConfigError as exc:
        conn.send(("error", {"error": exc.message(), "field": exc.field}))
    except Exception as exc:
        conn.send(("error", {"error": f"internal error: {type(exc).__name__}: {exc}"}))
    conn.close()
