"""Which hardware constant does this plan's step time hang on?

The *elasticity* of an output ``y`` (step time, memory per GPU) to a constant ``x`` is
``d ln y / d ln x``: the percentage change of ``y`` per percent of ``x``. Step time has
elasticity -1 to a constant that scales all the work (a GEMM efficiency when the plan is
compute bound), about 0 to one whose cost is hidden (the bandwidth of a fabric whose traffic
overlaps compute) and in between where the time is shared. So the table answers "would a
faster fabric help this plan?" (elasticity to ``tiers.N.bandwidth_GBps`` near 0: no) and
"which constant's uncertainty matters for this prediction?" (the largest |elasticity|).

Every numeric (float) field of the topology's ``gpu`` block (nested ones such as
``peak_tflops.bf16`` too) and of each network tier is perturbed, discovered from the schema
so that constants added later are covered, and the ``reliability`` constants of the expected
step (:data:`VARIABILITY`: jitter, slow nodes, host and barrier noise). Central finite
differences in log space: the constant is scaled by ``1 - step`` and ``1 + step`` (default
10 %; a bounded field, such as an efficiency near 1, that rejects the upper value is
differenced one-sidedly) and
``E = (ln y+ - ln y-) / (ln x+ - ln x-)``. Integer structural fields (tier ``size``) and zero
constants have no elasticity and are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_core import ValidationError

from .api import Ref, resolve, simulate_resolved
from .config import TopologyConfig
from .config.schema import Schema
from .errors import ConfigError

DEFAULT_STEP = 0.10


@dataclass(frozen=True)
class Elasticity:
    """One constant: its dotted path, value, and the outputs at ``value * (1 -/+ step)``."""

    name: str
    value: float
    low: float  # the constant's perturbed values actually used
    high: float
    step_time_low_s: float
    step_time_high_s: float
    step_time: float  # elasticity of step time
    memory: float  # elasticity of memory per GPU


def constants(t: TopologyConfig) -> list[tuple[str, float]]:
    """(dotted path, value) of every float constant of the GPU block and each tier."""
    out: list[tuple[str, float]] = []

    def walk(obj: Schema, prefix: str) -> None:
        for name in type(obj).model_fields:
            v = getattr(obj, name)
            if isinstance(v, Schema):
                walk(v, f"{prefix}{name}.")
            elif isinstance(v, float) and v != 0.0:
                out.append((f"{prefix}{name}", v))

    walk(t.gpu, "gpu.")
    for i, tier in enumerate(t.tiers):
        walk(tier, f"tiers.{i}.")
    # the step-variability constants: every predicted step is the expected step
    out += [(f"reliability.{n}", v) for n in VARIABILITY
            if isinstance(v := getattr(t.reliability, n), float) and v != 0.0]
    return out


# reliability fields the expected step reads (simulator.metrics.variability)
VARIABILITY = ("jitter_sigma", "host_noise_s", "sync_noise_s", "slow_node_fraction",
               "slow_node_slowdown")


def _run(w, topology, topo_over: dict[str, Any]) -> tuple[float, float] | None:
    try:
        _, t = resolve(w, topology, None, topo_over)
    except (ConfigError, ValidationError):
        return None  # the perturbed value leaves the field's allowed range
    r = simulate_resolved(w, t)[0]
    return r.step_time_s, r.memory_per_gpu_GB


def _elasticity(y_lo: float, y_hi: float, x_lo: float, x_hi: float) -> float:
    return (math.log(y_hi) - math.log(y_lo)) / (math.log(x_hi) - math.log(x_lo))


def sensitivity(workload: Ref, topology: str | Path | dict | TopologyConfig,
                overrides: Mapping[str, Any] | None = None,
                topology_overrides: Mapping[str, Any] | None = None,
                step: float = DEFAULT_STEP, only: Sequence[str] | None = None
                ) -> list[Elasticity]:
    """Elasticities of step time and memory per GPU to every hardware constant (or those
    whose dotted path starts with one of ``only``), largest |step-time elasticity| first.

    >>> rows = sensitivity("tiny", "dgx-h100")
    >>> min(r.step_time for r in rows) < 0
    True
    """
    if isinstance(step, bool) or not isinstance(step, int | float) or not 0 < step < 1:
        raise ConfigError("step", step, "must be between 0 and 1 (a fraction, e.g. 0.1)")
    base_over = dict(topology_overrides or {})
    w, t = resolve(workload, topology, dict(overrides or {}), base_over)
    check_only(t, only)
    base = _run(w, topology, base_over)
    rows = []
    for name, v in constants(t):
        if only and not any(name.startswith(prefix) for prefix in only):
            continue
        lo_x, hi_x = v * (1 - step), v * (1 + step)
        lo, hi = _run(w, topology, {**base_over, name: lo_x}), \
            _run(w, topology, {**base_over, name: hi_x})
        if hi is None:
            hi, hi_x = base, v
        if lo is None:
            lo, lo_x = base, v
        if lo_x == hi_x:
            continue
        rows.append(Elasticity(name, v, lo_x, hi_x, lo[0], hi[0],
                               _elasticity(lo[0], hi[0], lo_x, hi_x),
                               _elasticity(lo[1], hi[1], lo_x, hi_x)))
    return sorted(rows, key=lambda r: (-abs(r.step_time), -abs(r.memory), r.name))


def check_only(t: TopologyConfig, only: Sequence[str] | None, field: str = "only") -> None:
    """Refuse a prefix of ``only`` that matches no constant of ``t`` (an empty table
    would read as "nothing matters"), naming ``field`` and the constants there are."""
    names = [name for name, _ in constants(t)]
    for prefix in only or ():
        if not any(name.startswith(prefix) for name in names):
            heads = sorted({".".join(n.split(".")[:2 if n.startswith("tiers.") else 1])
                            for n in names})
            raise ConfigError(field, prefix, "matches no constant; paths start with "
                              + ", ".join(heads) + " (`--all` lists every constant)")


def describe(name: str, t: TopologyConfig | None = None) -> str:
    """``tiers.1.bandwidth_GBps`` -> ``leaf bandwidth_GBps`` (tier names from ``t``)."""
    parts = name.split(".")
    if parts[0] == "tiers" and t is not None:
        return f"{t.tiers[int(parts[1])].name} {'.'.join(parts[2:])}"
    return ".".join(parts[1:]) if parts[0] == "gpu" else name

