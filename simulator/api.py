"""The Python API that capacity-planning scripts import.

>>> from simulator import simulate
>>> r = simulate("tiny", "dgx-h100", **{"parallelism.tensor": 2})
>>> r.step_time_s > 0
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import TopologyConfig, Workload, load_topology, load_workload
from .engine import ListRecorder, NullRecorder, run_engine
from .hardware import Topology
from .memory import estimate_memory
from .metrics import Result, summarize
from .workload.plan import Plan, build_plan
from .workload.validate import check_plan

Ref = str | Path | dict | Workload


def _norm(overrides: dict[str, Any]) -> dict[str, Any]:
    """Accept ``parallelism.tensor`` or ``parallelism__tensor`` spellings."""
    return {k.replace("__", "."): v for k, v in overrides.items()}


def resolve(workload: Ref, topology: str | Path | dict | TopologyConfig,
            overrides: dict[str, Any] | None = None,
            topology_overrides: dict[str, Any] | None = None
            ) -> tuple[Workload, TopologyConfig]:
    """Load, override and cross-check a configuration; raises ConfigError."""
    w = load_workload(workload, _norm(overrides or {}))
    t = load_topology(topology, _norm(topology_overrides or {}))
    check_plan(w, t)
    return w, t


def plan(workload: Ref, topology, **overrides: Any) -> Plan:
    """The costed plan (phases, engine input) without running the engine."""
    w, t = resolve(workload, topology, overrides)
    return build_plan(w, Topology.from_config(t))


def simulate_resolved(w: Workload, t: TopologyConfig, keep_records: bool = False
                      ) -> tuple[Result, Plan, Any]:
    """Simulate an already validated configuration; returns (result, plan, engine run)."""
    topo = Topology.from_config(t)
    p = build_plan(w, topo)
    run = run_engine(p.engine_input, ListRecorder() if keep_records else NullRecorder())
    mem = estimate_memory(w, topo, p.partition)
    return summarize(p, run, mem), p, run


def simulate(workload: Ref, topology: str | Path | dict | TopologyConfig,
             topology_overrides: dict[str, Any] | None = None, **overrides: Any) -> Result:
    """Simulate one training step.

    Args:
        workload: a path, shipped name (``"llama3-8b"``), dict or :class:`Workload`.
        topology: a path, shipped name (``"dgx-h100"``), dict or :class:`TopologyConfig`.
        topology_overrides: dotted-path overrides of the topology.
        **overrides: dotted-path overrides of the workload, e.g.
            ``**{"parallelism.tensor": 4}`` or ``parallelism__tensor=4``.
    """
    w, t = resolve(workload, topology, overrides, topology_overrides)
    return simulate_resolved(w, t)[0]
