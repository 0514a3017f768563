"""From a sweep point to a validated configuration, its identity and its input columns.

A point is loaded exactly as ``simulate`` would load it (the same override
rules, the same :func:`~simulator.workload.validate.check_plan`), so a sweep row
and a ``simulate`` call on the same settings see the same configuration. A
point that breaks a rule becomes an *invalid* row carrying the ConfigError's
one-line message as its reason; it is never sent to a worker.

Identity: a configuration's key is the sha256 of the canonical JSON (sorted
keys, no spaces) of the resolved workload and topology ``model_dump`` plus the
simulator version. Points that resolve to the same configuration share a key
and are simulated once; the result store is keyed by it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import TopologyConfig, Workload
from ..config.loader import apply_overrides, is_file, read_document, validate_model
from ..errors import ConfigError
from ..workload.validate import check_plan
from .spec import Point

SKIPPED = ("sources", "description")  # citations and prose: not inputs of the model


class Documents:
    """Reads each referenced YAML once per sweep.

    A reference is a mapping, a path (tried first relative to ``base_dir``,
    the sweep file's folder) or a shipped name.
    """

    def __init__(self, base_dir: Path | None = None):
        self.base_dir = base_dir
        self._cache: dict[tuple[str, str], Any] = {}

    def get(self, ref: Any, kind: str) -> tuple[dict, dict[str, int], str]:
        if isinstance(ref, dict):
            return ref, {}, "<sweep>"
        key = (kind, str(ref))
        if key not in self._cache:
            path = ref
            if self.base_dir is not None and is_file(self.base_dir / str(ref)):
                path = self.base_dir / str(ref)
            try:
                self._cache[key] = read_document(path, kind)
            except ConfigError as exc:
                self._cache[key] = exc
        hit = self._cache[key]
        if isinstance(hit, ConfigError):
            raise hit
        return hit


@dataclass
class Resolved:
    """A point after loading: valid (``key`` set) or invalid (``reason`` set)."""

    point: Point
    workload: Workload | None
    topology: TopologyConfig | None
    key: str | None
    inputs: dict[str, Any]
    reason: str | None = None

    @property
    def valid(self) -> bool:
        return self.key is not None


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys for nested mappings and lists of mappings (``tiers.0.size``)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if k in SKIPPED:
            continue
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat(v, key + "."))
        elif isinstance(v, list) and any(isinstance(x, dict) for x in v):
            out.update(flat({str(i): x for i, x in enumerate(v)}, key + "."))
        elif isinstance(v, list):
            out[key] = "; ".join(map(str, v))
        else:
            out[key] = v
    return out


def config_key(w: Workload, t: TopologyConfig) -> str:
    """sha256 of the canonical JSON of the resolved configuration (see module docstring)."""
    from .. import __version__

    doc = {"simulator": __version__, "workload": w.model_dump(mode="json"),
           "topology": t.model_dump(mode="json")}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def resolve_point(point: Point, docs: Documents) -> Resolved:
    """Load, override and check one point; never raises ConfigError."""
    win: dict[str, Any] = {}
    tin: dict[str, Any] = {"topology.name": str(point.topology)}
    try:
        tdata, tlines, tsrc = docs.get(point.topology, "topologies")
        traw = apply_overrides(tdata, point.topology_overrides)
        tin = flat(traw, "topology.")
        t = validate_model(TopologyConfig, traw, tlines, tsrc)
        tin = flat(t.model_dump(), "topology.")
        wdata, wlines, wsrc = docs.get(point.workload, "workloads")
        wraw = apply_overrides(wdata, point.overrides)
        win = flat(wraw)
        w = validate_model(Workload, wraw, wlines, wsrc)
        win = flat(w.model_dump())
        if point.num_gpus is not None:
            wraw = apply_overrides(wraw, {"parallelism.data": _data_degree(w, point.num_gpus)})
            win = flat(wraw)
            w = validate_model(Workload, wraw, wlines, wsrc)
        win = flat(w.model_dump())
        check_plan(w, t)
    except ConfigError as exc:
        return Resolved(point, None, None, None, {**win, **tin}, reason=exc.message())
    return Resolved(point, w, t, config_key(w, t), {**win, **tin})


def _data_degree(w: Workload, num_gpus: Any) -> int:
    """``num_gpus`` axis: data = gpus / (tensor * pipeline * context); nothing else moves."""
    p = w.parallelism
    fixed = p.tensor * p.pipeline * p.context
    if not isinstance(num_gpus, int) or isinstance(num_gpus, bool) or num_gpus < 1:
        raise ConfigError("num_gpus", num_gpus, "must be a positive integer")
    if num_gpus % fixed:
        raise ConfigError("num_gpus", num_gpus,
                          f"must be a multiple of tensor*pipeline*context "
                          f"({p.tensor}*{p.pipeline}*{p.context} = {fixed})")
    return num_gpus // fixed
