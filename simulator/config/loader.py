"""Read YAML, apply ``--set`` overrides, validate, and turn every failure into a ConfigError.

Errors name the file and line where the YAML knows it, the dotted field path,
the bad value and what is allowed; unknown keys get a "did you mean" hint.
No function here writes to disk.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from .topology import TopologyConfig
from .workload import Workload

M = TypeVar("M", bound=BaseModel)

REPO_ROOT = Path(__file__).resolve().parents[2]
SEARCH_DIRS = {"topologies": "topologies", "workloads": "workloads"}


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (YAML silently keeps the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(str(key), "duplicate key",
                              f"appears twice (first on line {seen[key] + 1})",
                              source=f"{loader.name}:{key_node.start_mark.line + 1}")
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _line_map(node: yaml.Node | None, prefix: str = "", out: dict[str, int] | None = None):
    """Map dotted paths (``parallelism.tensor``, ``tiers.0.size``) to 1-based lines."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            path = f"{prefix}.{k.value}" if prefix else str(k.value)
            out[path] = k.start_mark.line + 1
            _line_map(v, path, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            path = f"{prefix}.{i}" if prefix else str(i)
            out[path] = v.start_mark.line + 1
            _line_map(v, path, out)
    return out


def parse_yaml(text: str, name: str) -> tuple[dict, dict[str, int]]:
    """Parse a YAML document that must be a mapping; return it and its line map."""
    try:
        loader = _UniqueKeyLoader(text)
        loader.name = name
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
        lines = _line_map(yaml.compose(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{name}:{mark.line + 1}" if mark else name
        raise ConfigError("yaml", "syntax error", f"{exc.problem or exc}", source=where) from None
    except yaml.YAMLError as exc:
        raise ConfigError("yaml", "syntax error", str(exc), source=name) from None
    if data is None:
        raise ConfigError("document", "empty file", "expected a YAML mapping", source=name)
    if not isinstance(data, dict):
        raise ConfigError("document", type(data).__name__, "expected a YAML mapping at top level",
                          source=name)
    return data, lines


def resolve_path(ref: str | Path, kind: str) -> Path:
    """A path as given, or a shipped name (``dgx-h100``) looked up in ``topologies/``."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    if path.exists() and path.is_file():
        return path
    for base in (REPO_ROOT / SEARCH_DIRS[kind], Path.cwd() / SEARCH_DIRS[kind]):
        for cand in (base / f"{ref}.yaml", base / str(ref)):
            if cand.is_file():
                return cand
    shipped = sorted(p.stem for p in (REPO_ROOT / SEARCH_DIRS[kind]).glob("*.yaml"))
    hint = _did_you_mean(str(ref), shipped)
    raise ConfigError(f"--{kind[:-1]}" if kind == "topologies" else kind[:-1], str(ref),
                      f"no such file or shipped name{hint}; shipped: {', '.join(shipped)}")


def read_document(ref: str | Path | dict, kind: str) -> tuple[dict, dict[str, int], str]:
    """Load a document from a dict, a path or a shipped name."""
    if isinstance(ref, dict):
        return ref, {}, "<dict>"
    path = resolve_path(ref, kind)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(kind[:-1], str(ref), f"cannot be read: {exc.strerror}") from None
    data, lines = parse_yaml(text, str(path))
    return data, lines, str(path)


def parse_override(item: str) -> tuple[str, Any]:
    """``a.b=value`` -> (``a.b``, value parsed as YAML scalar)."""
    if "=" not in item:
        raise ConfigError("--set", item, "expected FIELD=VALUE, e.g. parallelism.tensor=4")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError("--set", item, "the field name before '=' is empty")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_overrides(data: dict, overrides: dict[str, Any] | None) -> dict:
    """Return a deep copy of ``data`` with dotted-path overrides applied."""
    out = _deep_copy(data)
    for dotted, value in (overrides or {}).items():
        node: Any = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = _child(node, part, dotted, value)
        if isinstance(node, list):
            node[_index(node, parts[-1], dotted, value)] = value
        else:
            node[parts[-1]] = value
    return out


def _index(node: list, part: str, dotted: str, value: Any) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(dotted, value, f"'{part}' is not an index below {len(node)}")
    return int(part)


def _child(node: Any, part: str, dotted: str, value: Any) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, dotted, value)]
    nxt = node.get(part)
    if nxt is None:
        nxt = node[part] = {}
    if not isinstance(nxt, dict | list):
        raise ConfigError(dotted, value, f"'{part}' is not a section that has fields")
    return nxt


def _deep_copy(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _deep_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_copy(v) for v in obj]
    return obj


def validate_model(cls: type[M], data: dict, lines: dict[str, int], source: str) -> M:
    """Validate with pydantic; translate the first error into a ConfigError."""
    try:
        return cls.model_validate(data)
    except ConfigError as exc:
        raise _with_source(exc, lines, source) from None
    except ValidationError as exc:
        raise _translate(cls, exc, data, lines, source) from None


def _with_source(exc: ConfigError, lines: dict[str, int], source: str) -> ConfigError:
    if exc.source:
        return exc
    line = lines.get(exc.field.replace("[", ".").replace("]", ""))
    where = f"{source}:{line}" if line else source
    return ConfigError(exc.field, exc.value, exc.allowed, source=where)


def _translate(cls: type[BaseModel], exc: ValidationError, data: dict, lines: dict[str, int],
               source: str) -> ConfigError:
    err = exc.errors()[0]
    original = (err.get("ctx") or {}).get("error")
    if isinstance(original, ConfigError):
        return _with_source(original, lines, source)
    loc = [str(p) for p in err["loc"]]
    path = ".".join(loc)
    kind = err["type"]
    value = err.get("input")
    line = lines.get(path) or lines.get(".".join(loc[:-1]))
    where = f"{source}:{line}" if line else source
    if kind == "extra_forbidden":
        allowed = _fields_at(cls, loc[:-1])
        hint = _did_you_mean(loc[-1], allowed)
        return ConfigError(path, value, f"unknown field{hint}; allowed here: {', '.join(allowed)}",
                           source=where)
    if kind == "missing":
        return ConfigError(path, None, "is required but missing", source=where)
    if kind == "literal_error":
        return ConfigError(path, value, f"must be one of {err['ctx']['expected']}", source=where)
    return ConfigError(path, value, err["msg"].replace("Input should", "must").lower(),
                       source=where)


def _fields_at(cls: type[BaseModel], loc: list[str]) -> list[str]:
    model: Any = cls
    for part in loc:
        if part.isdigit():
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return []
        ann = field.annotation
        model = _model_in(ann)
        if model is None:
            return []
    return sorted(model.model_fields) if hasattr(model, "model_fields") else []


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def load_workload(ref: str | Path | dict | Workload,
                  overrides: dict[str, Any] | None = None) -> Workload:
    """Workload from a path, shipped name, dict or object, with dotted overrides."""
    if isinstance(ref, Workload):
        if not overrides:
            return ref
        ref = ref.model_dump(exclude_unset=False)
    data, lines, source = read_document(ref, "workloads")
    return validate_model(Workload, apply_overrides(data, overrides), lines, source)


def load_topology(ref: str | Path | dict | TopologyConfig,
                  overrides: dict[str, Any] | None = None) -> TopologyConfig:
    """Topology from a path, shipped name, dict or object, with dotted overrides."""
    if isinstance(ref, TopologyConfig):
        if not overrides:
            return ref
        ref = ref.model_dump()
    data, lines, source = read_document(ref, "topologies")
    return validate_model(TopologyConfig, apply_overrides(data, overrides), lines, source)
