"""A web request's configuration: shipped names or YAML text, never a server path.

``{"workload": NAME_OR_YAML_TEXT, "topology": NAME_OR_YAML_TEXT, "overrides": {...},
"topology_overrides": {...}}`` becomes a validated ``(Workload, TopologyConfig)`` pair,
with the CLI's own loaders and so the CLI's one-line :class:`ConfigError` messages.

A name is looked up among the shipped documents only (``clustersim list``); anything
else must be YAML text (it has a newline or a ``:``), parsed as a document called
``workload.yaml`` / ``topology.yaml``. The two fields that name a file on the machine
reading the document (``model.hf_config``, ``model.moe.router_trace``) are refused in
text and in overrides alike, so a page can never make the server read one of its files.
Uses no web library: the tests and the worker processes import it alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..api import resolve
from ..config.files import MAX_BYTES
from ..config.loader import (
    apply_overrides,
    did_you_mean,
    parse_yaml,
    shipped_dirs,
    shipped_names,
    validate_model,
)
from ..config.topology import TopologyConfig
from ..config.workload import Workload
from ..errors import ConfigError
from ..shape.validate import check_plan

KINDS = {"workload": ("workloads", Workload), "topology": ("topologies", TopologyConfig)}
PATH_FIELDS = ("model.hf_config", "model.moe.router_trace")  # fields that name a file
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_OVERRIDES = 200


def shipped_path(kind: str, name: str) -> str:
    """The file of a shipped workload or topology; ConfigError for any other name."""
    folder = KINDS[kind][0]
    names = shipped_names(folder)
    if NAME.fullmatch(name) and name in names:
        for base in shipped_dirs(folder):
            if (base / f"{name}.yaml").is_file():
                return str(base / f"{name}.yaml")
    raise ConfigError(kind, name[:200], f"no such shipped name{did_you_mean(name[:200], names)};"
                      f" shipped: {', '.join(names)} (or send the YAML text itself)")


def is_text(ref: str) -> bool:
    """YAML text rather than a name: a document has a newline or a ``key: value``."""
    return "\n" in ref or ":" in ref


def check_overrides(field: str, value: Any) -> dict[str, Any]:
    """A JSON object of dotted paths to values, none of them a path field."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(field, type(value).__name__,
                          "expected an object of dotted field paths to values")
    if len(value) > MAX_OVERRIDES:
        raise ConfigError(field, len(value), f"at most {MAX_OVERRIDES} overrides")
    out = {str(k): v for k, v in value.items()}
    for key in out:
        if key in PATH_FIELDS or any(p.startswith(key + ".") for p in PATH_FIELDS):
            raise ConfigError(key, out[key], "names a file on the server; the web page "
                              "takes shipped names or YAML text only")
    return out


def _refuse_paths(data: dict, source: str) -> None:
    for dotted in PATH_FIELDS:
        node: Any = data
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            raise ConfigError(dotted, node, "names a file on the server; the web page takes "
                              "shipped names or YAML text only (paste the fields instead)",
                              source=source)


def _from_text(kind: str, text: str, overrides: dict[str, Any]) -> Any:
    """A document sent as text, validated as the CLI validates a file."""
    if len(text.encode("utf-8")) > MAX_BYTES:
        raise ConfigError(kind, f"{len(text)} characters",
                          f"is larger than {MAX_BYTES // 1_000_000} MB; a configuration is a "
                          "few kB")
    source = f"{kind}.yaml"
    data, lines = parse_yaml(text, source)
    _refuse_paths(data, source)
    return validate_model(KINDS[kind][1], apply_overrides(data, overrides), lines, source,
                          overridden=overrides.keys())


def resolve_request(body: Any) -> tuple[Workload, TopologyConfig]:
    """``(workload, topology)`` of a request body; ConfigError (one line) otherwise.

    Shipped names go through :func:`simulator.api.resolve` with the shipped file's
    path, exactly as ``clustersim run NAME -t NAME --set ...`` does, so errors match."""
    if not isinstance(body, Mapping):
        raise ConfigError("request", type(body).__name__, "expected a JSON object")
    refs = {}
    for kind in KINDS:
        ref = body.get(kind)
        if not isinstance(ref, str) or not ref.strip():
            raise ConfigError(kind, ref, "expected a shipped name or YAML text")
        refs[kind] = ref
    ov = check_overrides("overrides", body.get("overrides"))
    tov = check_overrides("topology_overrides", body.get("topology_overrides"))
    if not is_text(refs["workload"]) and not is_text(refs["topology"]):
        w, t = resolve(shipped_path("workload", refs["workload"]),
                       shipped_path("topology", refs["topology"]), ov, tov)
        _refuse_paths(w.model_dump(), "override")
        return w, t
    w = (_from_text("workload", refs["workload"], ov) if is_text(refs["workload"])
         else resolve_one("workload", refs["workload"], ov))
    t = (_from_text("topology", refs["topology"], tov) if is_text(refs["topology"])
         else resolve_one("topology", refs["topology"], tov))
    _refuse_paths(w.model_dump(), "override")
    check_plan(w, t)
    return w, t


def resolve_one(kind: str, name: str, overrides: dict[str, Any]) -> Any:
    """One shipped document with overrides (the other one came as text)."""
    from ..config import load_topology, load_workload

    load = load_workload if kind == "workload" else load_topology
    return load(shipped_path(kind, name), overrides)


def shipped() -> dict[str, list[str]]:
    """The names the page offers: shipped workloads and topologies, pipeline schedules,
    software-stack profiles."""
    from ..config.stacks import stack_names
    from ..schedules import SCHEDULES

    return {"workloads": shipped_names("workloads"), "topologies": shipped_names("topologies"),
            "schedules": sorted(SCHEDULES), "stacks": stack_names()}
