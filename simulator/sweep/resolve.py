"""From a sweep point to a validated configuration, its identity and its input columns.

A point is loaded exactly as ``simulate`` would load it (the same override
rules, the same :func:`~simulator.shape.validate.check_plan`), so a sweep row
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
from ..shape.validate import check_plan
from ..version import __version__
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
        self._topologies: dict[Any, tuple[Any, _Topology]] = {}

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

    def topology(self, point: Point) -> _Topology:
        """The point's topology, validated once per (reference, overrides) in a sweep."""
        key = (_ref_key(point.topology), _freeze(point.topology_overrides))
        if key[0] is None or key[1] is None:
            return _resolve_topology(point, self)
        hit = self._topologies.get(key)
        if hit is None:  # the reference is kept with it, so a dict's id stays its own
            hit = self._topologies[key] = (point.topology, _resolve_topology(point, self))
        return hit[1]


def _ref_key(ref: Any) -> Any:
    """A dict reference by identity (the spec keeps it alive), a name or path by value."""
    if isinstance(ref, dict):
        return ("dict", id(ref))
    if isinstance(ref, str | Path):
        return ("ref", str(ref))
    return None


def _freeze(value: Any) -> Any:
    """A hashable image of an overrides value that tells apart 1, 1.0 and True (types
    included), or None for a value that has none (then nothing is cached)."""
    if isinstance(value, dict):
        items = [(k, _freeze(v)) for k, v in value.items()]
        return None if any(v is None for _, v in items) else ("dict", tuple(items))
    if isinstance(value, list | tuple):
        items = [_freeze(v) for v in value]
        return None if any(v is None for v in items) else (type(value).__name__, tuple(items))
    if value is None or isinstance(value, str | int | float | bool):
        return (type(value).__name__, repr(value))
    return None


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
    return _key(_canonical(w), _canonical(t))


def _canonical(model: Workload | TopologyConfig) -> str:
    """Canonical JSON text of one model (sorted keys, no spaces)."""
    return json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def _key(workload_json: str, topology_json: str) -> str:
    """The key from the two canonical texts: the text ``json.dumps`` writes for
    ``{"simulator", "topology", "workload"}`` with sorted keys, assembled from its parts
    so that a topology shared by every point of a sweep is serialised once."""
    text = (f'{{"simulator":{json.dumps(__version__)},"topology":{topology_json},'
            f'"workload":{workload_json}}}')
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _Topology:
    """A topology reference with its overrides, resolved once per sweep."""

    config: TopologyConfig | None
    inputs: dict[str, Any]  # the ``topology.*`` columns, as far as they could be read
    canonical: str | None = None  # canonical JSON text (config_key)
    error: ConfigError | None = None


def _resolve_topology(point: Point, docs: Documents) -> _Topology:
    tin: dict[str, Any] = {"topology.name": str(point.topology)}
    try:
        tdata, tlines, tsrc = docs.get(point.topology, "topologies")
        traw = apply_overrides(tdata, point.topology_overrides)
    except ConfigError as exc:
        return _Topology(None, tin, error=exc)
    try:
        t = validate_model(TopologyConfig, traw, tlines, tsrc)
    except ConfigError as exc:
        return _Topology(None, flat(traw, "topology."), error=exc)
    return _Topology(t, flat(t.model_dump(), "topology."), _canonical(t))


def resolve_point(point: Point, docs: Documents) -> Resolved:
    """Load, override and check one point; never raises ConfigError.

    An invalid point keeps the inputs read before the failing step: the topology as
    given (or as validated), the workload as given (or as validated)."""
    topo = docs.topology(point)
    if topo.error is not None:
        return Resolved(point, None, None, None, dict(topo.inputs), reason=topo.error.message())
    t = topo.config
    assert t is not None
    w: Workload | None = None
    win: dict[str, Any] = {}
    try:
        wdata, wlines, wsrc = docs.get(point.workload, "workloads")
        wraw = apply_overrides(wdata, point.overrides)
        w = _validate(wraw, wlines, wsrc)
        if point.num_gpus is not None:
            wraw = apply_overrides(wraw, {"parallelism.data": _data_degree(w, point.num_gpus)})
            w = None
            w = _validate(wraw, wlines, wsrc)
        win = flat(w.model_dump())
        check_plan(w, t)
    except _Invalid as exc:  # the workload as given
        return Resolved(point, None, None, None, {**flat(exc.raw), **topo.inputs},
                        reason=exc.error.message())
    except ConfigError as exc:
        if w is not None and not win:
            win = flat(w.model_dump())
        return Resolved(point, None, None, None, {**win, **topo.inputs}, reason=exc.message())
    return Resolved(point, w, t, _key(_canonical(w), topo.canonical or ""),
                    {**win, **topo.inputs})


class _Invalid(Exception):
    """A workload document that failed validation, with the document (its columns)."""

    def __init__(self, error: ConfigError, raw: dict):
        super().__init__(error.message())
        self.error, self.raw = error, raw


def _validate(raw: dict, lines: dict[str, int], source: str) -> Workload:
    try:
        return validate_model(Workload, raw, lines, source)
    except ConfigError as exc:
        raise _Invalid(exc, raw) from None


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
