"""A sweep document and its expansion into configuration points.

A sweep names one base configuration and the axes that vary it::

    workload: llama3-70b            # path, shipped name or inline mapping
    topology: dgx-h100
    set: {training.global_batch_size: 1024}   # base workload overrides
    set_topology: {}                          # base topology overrides
    axes:                                     # cartesian product, in this order
      parallelism.tensor: [4, 8]
      parallelism.pipeline: [4, 8]
      num_gpus: [512, 1024]                   # derived: parallelism.data = gpus/(tp*pp*cp)
      topology: [dgx-h100, gb200-nvl72]       # the topology itself can vary
    zip_axes:                                 # each group varies its keys together
      - parallelism.pipeline_schedule: [1f1b, interleaved]
        parallelism.virtual_pipeline: [null, 5]

Axis keys are dotted workload fields (``parallelism.tensor``), topology fields
prefixed with ``topology.`` (``topology.tiers.1.bandwidth_GBps``), or one of
the special keys ``workload``, ``topology`` and ``num_gpus``. Points are
numbered in expansion order: the product of ``axes`` in the order written
(the last one varies fastest), each zipped group acting as one more axis after
them. That number, ``config_id``, orders every result table, whichever
executor computed it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_core import ValidationError

from ..config import TopologyConfig, Workload
from ..config.loader import did_you_mean, parse_yaml, read_text, resolve_path, submodel
from ..config.schema import Field, Schema
from ..errors import ConfigError

SPECIAL = ("workload", "topology", "num_gpus")
TOPOLOGY_PREFIX = "topology."


class SweepSpec(Schema):
    """The sweep document (see the module docstring). ``base_dir`` is set by the loader
    (the document's folder) or by :func:`make_spec`, never read from the document."""

    workload: Any = None
    topology: Any = None
    set: dict[str, Any] = Field(default_factory=dict)
    set_topology: dict[str, Any] = Field(default_factory=dict)
    axes: dict[str, list[Any]] = Field(default_factory=dict)
    zip_axes: list[dict[str, list[Any]]] = Field(default_factory=list)  # one group: a mapping
    time_to_train: dict[str, Any] | None = None  # simulator.reliability.sweep_metrics
    base_dir: Any = None  # a Path: where relative paths in the document are looked up


@dataclass(frozen=True)
class Point:
    """One configuration of a sweep, before it is loaded and validated."""

    index: int
    workload: Any
    topology: Any
    overrides: dict[str, Any] = field(default_factory=dict)
    topology_overrides: dict[str, Any] = field(default_factory=dict)
    num_gpus: int | None = None


def make_spec(workload: Any, topology: Any, axes: dict | None = None,
              zip_axes: dict | list | None = None, overrides: dict | None = None,
              topology_overrides: dict | None = None, base_dir: Path | None = None,
              time_to_train: dict | None = None) -> SweepSpec:
    """Build and check a spec from Python values (the :func:`sweep` arguments)."""
    if isinstance(workload, Workload):
        workload = workload.model_dump()
    if isinstance(topology, TopologyConfig):
        topology = topology.model_dump()
    data = {"workload": workload, "topology": topology, "set": overrides or {},
            "set_topology": topology_overrides or {}, "axes": axes or {},
            "zip_axes": zip_axes or [], "time_to_train": time_to_train}
    return _validated(data, "<sweep>", None if base_dir is None else Path(base_dir))


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep YAML (a path or a shipped name such as ``llama3-70b-plans``);
    relative paths in it are taken from its folder."""
    path = resolve_path(path, "sweeps")
    text = read_text(path, "sweep", str(path))
    data, _ = parse_yaml(text, str(path))
    return _validated(data, str(path), path.resolve().parent)


def _validated(data: dict, source: str, base_dir: Path | None) -> SweepSpec:
    if isinstance(data, dict):
        data = {**data, "base_dir": base_dir}
        if isinstance(data.get("zip_axes"), dict):  # one zipped group written as a mapping
            data["zip_axes"] = [data["zip_axes"]]
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError(loc, err.get("input"), err["msg"].lower(), source=source) from None
    _check_keys(spec, source)
    return spec


def _check_keys(spec: SweepSpec, source: str) -> None:
    seen: set[str] = set()
    groups = [spec.axes, *spec.zip_axes]
    for group in groups:
        lengths = {len(v) for v in group.values()}
        if group is not spec.axes and len(lengths) > 1:
            raise ConfigError("zip_axes", sorted(group),
                              f"zipped lists must have equal lengths (got {sorted(lengths)})",
                              source=source)
        for key, values in group.items():
            if not values:
                raise ConfigError(f"axes.{key}", values, "needs at least one value",
                                  source=source)
            if key in seen:
                raise ConfigError(f"axes.{key}", None, "is varied twice", source=source)
            seen.add(key)
            check_key(key, source)
    if "num_gpus" in seen and "parallelism.data" in seen | set(spec.set):
        raise ConfigError("axes.num_gpus", None, "sets parallelism.data itself; do not also "
                          "set or vary parallelism.data", source=source)
    if spec.workload is None and "workload" not in seen:
        raise ConfigError("workload", None, "is required (or vary it as an axis)", source=source)
    if spec.topology is None and "topology" not in seen:
        raise ConfigError("topology", None, "is required (or vary it as an axis)", source=source)


def check_key(key: str, source: str | None = None) -> None:
    """Refuse an axis key that names no field (the first two levels are checked)."""
    if key in SPECIAL:
        return
    model: Any = Workload
    parts = key.split(".")
    if key.startswith(TOPOLOGY_PREFIX):
        model, parts = TopologyConfig, parts[1:]
    for part in parts[:2]:
        if part.isdigit() or model is None:
            return
        fields = sorted(model.model_fields)
        if part not in fields:
            raise ConfigError(f"axes.{key}", None,
                              f"unknown field '{part}'{did_you_mean(part, fields)}; "
                              f"allowed here: {', '.join(fields)}", source=source)
        model = submodel(model.model_fields[part].annotation)


def expand(spec: SweepSpec) -> list[Point]:
    """Every point of the sweep, in config order (see the module docstring)."""
    dims = [[{key: v} for v in values] for key, values in spec.axes.items()]
    dims += [[dict(zip(group, vals, strict=True)) for vals in zip(*group.values(), strict=True)]
             for group in spec.zip_axes]
    points = []
    for i, combo in enumerate(itertools.product(*dims)):
        values: dict[str, Any] = {}
        for d in combo:
            values.update(d)
        points.append(_point(spec, i, values))
    return points


def _point(spec: SweepSpec, index: int, values: dict[str, Any]) -> Point:
    over, topo_over = dict(spec.set), dict(spec.set_topology)
    for key, v in values.items():
        if key.startswith(TOPOLOGY_PREFIX):
            topo_over[key[len(TOPOLOGY_PREFIX):]] = v
        elif key not in SPECIAL:
            over[key] = v
    return Point(index=index, workload=values.get("workload", spec.workload),
                 topology=values.get("topology", spec.topology), overrides=over,
                 topology_overrides=topo_over, num_gpus=values.get("num_gpus"))
