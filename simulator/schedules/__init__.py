"""Pipeline schedules: the order in which each stage runs its forward and backward phases.

A schedule is one file in this package: a module that defines ``SCHEDULE``, an
instance of :class:`~.base.Schedule` (see that module for the interface:
placement, per-stage order of F / B / W steps, memory in flight, rules).
The registry :data:`SCHEDULES` collects every module here at import, so adding
a schedule touches this directory and its tests only; the engine, the memory
model and the configuration ask the registry. ``parallelism.pipeline_schedule``
names the schedule.

Closed form shared by GPipe and (interleaved) 1F1B: :func:`bubble_closed_form`.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..errors import ConfigError
from .base import FusedStep, Route, Schedule, Step, is_fused


def _discover() -> dict[str, Schedule]:
    """Every ``SCHEDULE`` defined by a module of this package (a plugin registry)."""
    found: dict[str, Schedule] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name == "base":
            continue
        sched = getattr(importlib.import_module(f"{__name__}.{info.name}"), "SCHEDULE", None)
        if isinstance(sched, Schedule):
            found[sched.name] = sched
    return found


SCHEDULES: dict[str, Schedule] = _discover()


def get_schedule(name: str) -> Schedule:
    if name not in SCHEDULES:
        raise ConfigError("parallelism.pipeline_schedule", name,
                          f"one of {', '.join(sorted(SCHEDULES))}")
    return SCHEDULES[name]


def schedule_of(parallelism) -> Schedule:
    """The schedule a ``ParallelConfig`` runs: its ``pipeline_schedule``, with Megatron-Core's
    ``microbatch_group_size_per_vp_stage`` where set (the interleaved schedule only)."""
    sched = get_schedule(parallelism.pipeline_schedule)
    n = parallelism.microbatch_group_size_per_vp_stage
    if n is None or (n == parallelism.pipeline and sched.virtual):
        return sched
    if not sched.virtual:
        raise ConfigError("parallelism.microbatch_group_size_per_vp_stage", n,
                          "applies to pipeline_schedule 'interleaved' only (Megatron-Core "
                          "reads it for the interleaved schedule)")
    return sched.grouped(n)


def build_schedule(name: str, p: int, m: int, v: int = 1) -> list[list[Step]]:
    """Per-stage step lists of schedule ``name``."""
    return get_schedule(name).steps(p, m, v)


def bubble_closed_form(p: int, m: int, v: int = 1) -> float:
    """Idle fraction of the pipeline time with equal stages and free communication.

    ``(p-1) / (v*m + p-1)``: the bubble of (p-1) stage-times shrunk by v
    (Narayanan et al. 2021, Eq. 1 and Sec. 2.2.1).
    """
    return (p - 1) / (v * m + p - 1)


__all__ = ["SCHEDULES", "FusedStep", "Route", "Schedule", "Step", "bubble_closed_form",
           "build_schedule", "get_schedule", "is_fused", "schedule_of"]
