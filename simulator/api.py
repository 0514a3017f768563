"""The Python API that capacity-planning scripts import.

Every entry point takes a configuration the same way: a workload and a
topology (path, shipped name, dict or config object), then
``overrides`` (dotted workload paths), ``topology_overrides`` (dotted topology
paths) and ``seed`` (the root seed, ``training.seed``):

>>> from simulator import simulate
>>> r = simulate("tiny", "dgx-h100", overrides={"parallelism.tensor": 2})
>>> r.step_time_s > 0 and r.hfu <= 1
True

:func:`simulator.sweep.sweep` and :func:`simulator.sweep.search` take the same
three keywords. The older spelling, overrides as keyword arguments
(``simulate(w, t, **{"parallelism.tensor": 2})`` or ``parallelism__tensor=2``),
still works for existing scripts and is merged under ``overrides``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .config import TopologyConfig, Workload, load_topology, load_workload
from .engine import ListRecorder, NullRecorder, run_engine
from .errors import ConfigError
from .hardware import Topology
from .memory import estimate_memory
from .metrics import Result, summarize, with_expected_step
from .metrics.variability import Variability, expected_step
from .shape.validate import check_plan
from .workload.plan import Plan, build_plan

Ref = str | Path | dict | Workload
TopologyRef = str | Path | dict | TopologyConfig
Overrides = Mapping[str, Any]


def merge_overrides(overrides: Overrides | None = None, seed: int | None = None,
                    legacy: Overrides | None = None) -> dict[str, Any]:
    """One dotted-path dict from ``overrides``, ``seed`` and the legacy keyword spelling.

    ``parallelism__tensor`` (a keyword-safe spelling) means ``parallelism.tensor``.
    """
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError("overrides", type(overrides).__name__,
                          "expected a mapping of dotted field paths to values")
    out = {str(k).replace("__", "."): v for k, v in {**(legacy or {}),
                                                     **(overrides or {})}.items()}
    if seed is not None:
        out["training.seed"] = seed
    return out


def resolve(workload: Ref, topology: TopologyRef, overrides: Overrides | None = None,
            topology_overrides: Overrides | None = None, seed: int | None = None
            ) -> tuple[Workload, TopologyConfig]:
    """Load, override and cross-check a configuration; raises ConfigError."""
    w = load_workload(workload, merge_overrides(overrides, seed))
    t = load_topology(topology, merge_overrides(topology_overrides))
    check_plan(w, t)
    return w, t


def plan(workload: Ref, topology: TopologyRef, overrides: Overrides | None = None,
         topology_overrides: Overrides | None = None, seed: int | None = None,
         **legacy: Any) -> Plan:
    """The costed plan (phases, engine input) without running the engine."""
    w, t = resolve(workload, topology, merge_overrides(overrides, seed, legacy),
                   topology_overrides)
    return build_plan(w, Topology.from_config(t))


def simulate_resolved(w: Workload, t: TopologyConfig, keep_records: bool = False,
                      variability: bool = True) -> tuple[Result, Plan, Any]:
    """Simulate an already validated configuration; returns (result, plan, engine run).

    The step is the *expected* step: the engine's replay with every phase at the expected
    pace of its slowest peer and the host noise of the job's nodes, from the topology's
    ``reliability`` section (:func:`simulator.metrics.variability.expected_step`); a
    real step waits for its slowest GPU, and the compute constants are fitted to real
    steps on that basis. ``variability=False`` gives the ideal step (every GPU at its
    modelled speed); ``result.step_time_ideal_s`` holds it either way, and
    ``breakdown_s["variability"]`` the difference. The engine run (records, per-stage
    times) is the ideal replay's.

    Without ``keep_records`` the plan's phases carry no op timelines (nothing reads
    them without the records; :func:`plan` gives the full plan)."""
    topo = Topology.from_config(t)
    p = build_plan(w, topo, ops=keep_records)
    run = run_engine(p.engine_input, ListRecorder() if keep_records else NullRecorder())
    mem = estimate_memory(w, topo, p.shape)
    result = summarize(p, run, mem)
    if variability:
        v = Variability.of(w, t)
        if not v.zero:
            result = with_expected_step(result, expected_step(p.engine_input, v))
    return result, p, run


def simulate(workload: Ref, topology: TopologyRef, overrides: Overrides | None = None,
             topology_overrides: Overrides | None = None, seed: int | None = None,
             variability: bool = True, **legacy: Any) -> Result:
    """Simulate one training step.

    Args:
        workload: a path, shipped name (``"llama3-8b"``), dict or :class:`Workload`.
        topology: a path, shipped name (``"dgx-h100"``), dict or :class:`TopologyConfig`.
        overrides: dotted-path overrides of the workload, e.g.
            ``{"parallelism.tensor": 4}``.
        topology_overrides: dotted-path overrides of the topology, e.g.
            ``{"tiers.1.bandwidth_GBps": 100}``.
        seed: root seed (``training.seed``); MoE router draws derive from it.
        variability: ``False`` for the ideal step, with no wait for slow peers or host
            noise (see :func:`simulate_resolved`).
        **legacy: the older keyword spelling of ``overrides``, kept for
            existing scripts (``**{"parallelism.tensor": 4}``, ``parallelism__tensor=4``).
    """
    w, t = resolve(workload, topology, merge_overrides(overrides, seed, legacy),
                   topology_overrides)
    return simulate_resolved(w, t, variability=variability)[0]
