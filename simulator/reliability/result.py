"""The result ``clustersim run`` reports for a resolved configuration, and its JSON text.

One code path for the command line and for ``clustersim serve``'s ``POST /api/run``, so the
page answers exactly what ``clustersim run --format json`` prints. The time-to-train models
load only when the step's percentiles are asked for (``variability``): they are not on the
default path of ``clustersim run``, whose start-up ``benchmarks/bench_startup.py`` measures.
"""

from __future__ import annotations

from ..api import simulate_resolved
from ..config import TopologyConfig, Workload
from ..metrics import Result


def run_result(w: Workload, t: TopologyConfig, ideal: bool = False, variability: bool = False,
               steps: int = 64) -> Result:
    """The expected step (``ideal``: without waits for slow peers; ``variability``: with its
    p50 / p99 from ``steps`` seeded replays)."""
    result, plan, _ = simulate_resolved(w, t, variability=not (ideal or variability))
    if variability:
        from .run import with_variability

        result = with_variability(result, plan.engine_input, w, t, steps)
    return result


def json_text(result: Result) -> str:
    """``--format json``: the one text both the CLI and ``POST /api/run`` give."""
    return result.to_json() + "\n"
