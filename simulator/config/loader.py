"""Read YAML, apply ``--set`` overrides, validate, and turn every failure into a ConfigError.

Errors name where the value came from (``file:line``, or ``override`` for a
``--set`` value), the dotted field path (``tiers.1.bandwidth_GBps``), the bad
value and what is allowed; unknown keys get a "did you mean" hint. YAML is
parsed in two steps: the node tree first (which knows lines, so duplicate keys,
non-string keys and alias bombs are reported with their line), then the Python
values. No function here writes to disk.

Two parsers build the same node tree: libyaml's (``yaml.CSafeLoader``, about ten
times faster: most of a ``clustersim run``'s reading time) and PyYAML's own.
The C one reads a document only when it is certainly shallow (its composer
recurses on the C stack, which a deeply nested document would overflow) and has none
of the constructs where the two parsers' readings differ (:func:`_c_reads_alike`: tags,
tabs, and two malformed forms only libyaml accepts); whenever it fails, the
pure-Python parser reads the document again, so every error message is PyYAML's,
with the same lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic_core import ValidationError

from ..errors import ConfigError
from .files import read_text
from .hf import expand_hf_config
from .schema import Schema
from .topology import TopologyConfig
from .workload import Workload

M = TypeVar("M", bound=Schema)

REPO_ROOT = Path(__file__).resolve().parents[2]
# Where installed copies of the shipped folders live: the wheel build (setup.py) copies
# the top-level workloads/, topologies/ and sweeps/ to simulator/shipped/.
INSTALLED_ROOT = Path(__file__).resolve().parents[1] / "shipped"
SEARCH_DIRS = {"topologies": "topologies", "workloads": "workloads", "sweeps": "sweeps",
               "stacks": "stacks"}
ARG_NAMES = {"topologies": "topology", "workloads": "workload", "sweeps": "sweep"}
MAX_VALUES = 100_000  # values in a document once YAML aliases are expanded
# What PyYAML's constructors raise for a well-formed but meaningless scalar: not YAMLError
# but ValueError (2024-02-30), TypeError / OverflowError, KeyError (!!bool maybe).
CONSTRUCT_ERRORS = (ValueError, TypeError, LookupError, OverflowError, AttributeError)
MAX_DEPTH = 64  # nesting of a document given as a Python dict (YAML is checked by the parser)
C_LOADER = getattr(yaml, "CSafeLoader", None)  # None where PyYAML was built without libyaml
# The C parser reads a document only when the number of characters that can open a
# collection (an upper bound of its nesting) is below this: far below the depth that
# would overflow even a small thread stack (libyaml's composer recurses in C).
C_MAX_OPENERS = 1000
C_MAX_DEPTH = 100  # deeper documents are read by PyYAML, which reports them as it always did
_GLUED_COMMENT = re.compile(r"[|>][-+0-9]*#")  # a block-scalar header and a comment, no space
SECTIONS = {Workload: ("workload", {"gpu", "tiers"}, "topology"),
            TopologyConfig: ("topology", {"model", "parallelism", "training"}, "workload")}


class _Deep(Exception):
    """A document nested deeper than C_MAX_DEPTH, left to the pure-Python parser."""


class _TooLarge(ConfigError):
    """A document holding more than MAX_VALUES values as written (no alias expanded)."""

    def __init__(self, name: str, counted: str):
        super().__init__("document", f"{counted} values", f"a configuration holds a few "
                         f"hundred values; at most {MAX_VALUES:,} are read", source=name)


def _check_size(text: str, name: str) -> None:
    """Refuse, before PyYAML's pure-Python parser spends seconds on it, a document with
    more than MAX_VALUES nodes: counted from libyaml's event stream when the text could
    hold that many (every node but the first follows a ',', ':', '-' or a line break)."""
    if C_LOADER is None or sum(text.count(c) for c in ",:-\n") < MAX_VALUES // 2:
        return
    nodes = 0
    try:
        for event in yaml.parse(text, Loader=C_LOADER):
            if isinstance(event, yaml.NodeEvent):
                nodes += 1
                if nodes > MAX_VALUES:
                    raise _TooLarge(name, f"more than {MAX_VALUES:,}")
    except yaml.YAMLError:  # PyYAML reads it and explains the error
        return


def _walk_nodes(node: yaml.Node, name: str, prefix: str, lines: dict[str, int],
                seen: set[int], depth: int = 0, max_depth: int | None = None) -> None:
    """Fill ``lines`` (dotted path -> 1-based line); refuse duplicate or non-scalar keys.

    Each node is visited once: an alias is the same node object as its anchor.
    ``max_depth``: raise :class:`_Deep` below that many levels.
    """
    if id(node) in seen:
        return
    if max_depth is not None and depth > max_depth:
        raise _Deep
    seen.add(id(node))
    if len(seen) > MAX_VALUES:
        raise _TooLarge(name, f"more than {MAX_VALUES:,}")
    children: list[tuple[str, yaml.Node]] = []
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key, value in node.value:
            line = key.start_mark.line + 1
            if not isinstance(key, yaml.ScalarNode):
                raise ConfigError(prefix or "document", "a list or mapping used as a key",
                                  "keys must be plain names", source=f"{name}:{line}")
            if key.tag == "tag:yaml.org,2002:merge":
                children.append(("<<", value))
                continue
            path = f"{prefix}.{key.value}" if prefix else str(key.value)
            if key.value in first:
                raise ConfigError(path, "duplicate key",
                                  f"appears twice (first on line {first[key.value]})",
                                  source=f"{name}:{line}")
            first[key.value] = line
            lines[path] = line
            children.append((path, value))
    elif isinstance(node, yaml.SequenceNode):
        for i, value in enumerate(node.value):
            path = f"{prefix}.{i}" if prefix else str(i)
            lines[path] = value.start_mark.line + 1
            children.append((path, value))
    for path, child in children:
        _walk_nodes(child, name, prefix if path == "<<" else path, lines, seen, depth + 1,
                    max_depth)


def _bad_scalar(root: yaml.Node, prefix: str = "") -> tuple[str, str]:
    """(dotted path, text) of the first scalar whose tag cannot construct its value."""
    stack: list[tuple[str, yaml.Node]] = [(prefix, root)]
    seen: set[int] = set()
    while stack:
        path, node = stack.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            try:
                yaml.constructor.SafeConstructor().construct_object(node)
            except (*CONSTRUCT_ERRORS, yaml.YAMLError):
                return path or "document", node.value
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.append((f"{path}.{key.value}" if path else str(key.value), value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((f"{path}.{i}" if path else str(i), v) for i, v in enumerate(node.value))
    return "document", "bad value"


def _count_values(data: Any, name: str) -> None:
    """Refuse documents whose aliases expand past MAX_VALUES values (or into a cycle)."""
    stack, count = [data], 0
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError("document", f"more than {MAX_VALUES} values",
                              "too large once YAML aliases (*name) are expanded; "
                              "is an alias recursive?", source=name)
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def parse_yaml(text: str, name: str) -> tuple[dict, dict[str, int]]:
    """Parse a YAML document that must be a mapping; return it and its line map.

    libyaml reads it where it safely can (see the module docstring), else, and
    whenever that fails, :func:`_parse_python`."""
    _check_size(text, name)
    fast = _parse_c(text, name)
    return fast if fast is not None else _parse_python(text, name)


def _parse_c(text: str, name: str) -> tuple[dict, dict[str, int]] | None:
    """Data and lines from libyaml, or None: not used, or failed (for whatever reason;
    the pure-Python parser then finds and explains the problem)."""
    if C_LOADER is None or not _c_reads_alike(text):
        return None
    lines: dict[str, int] = {}
    try:
        loader = C_LOADER(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _walk_nodes(node, name, "", lines, set(), max_depth=C_MAX_DEPTH)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
        if not isinstance(data, dict):
            return None
        _count_values(data, name)
    except _TooLarge:  # as written, so no reading would do better
        raise
    except Exception:  # any failure: PyYAML reads it again and explains
        return None
    return data, lines


def _c_reads_alike(text: str) -> bool:
    """Whether libyaml may read ``text``: shallow (at most C_MAX_OPENERS characters that can
    open a collection), and none of the constructs only one of the parsers accepts or
    where they differ: tags (``!``), tabs, a comment glued to a block-scalar header
    (``|#``), a ``?`` inside a flow collection (``{a?}``)."""
    return ("!" not in text and "\t" not in text and not _GLUED_COMMENT.search(text)
            and not ("?" in text and ("[" in text or "{" in text))
            and sum(text.count(c) for c in "[{-:?") <= C_MAX_OPENERS)


def _parse_python(text: str, name: str) -> tuple[dict, dict[str, int]]:
    """:func:`parse_yaml` with PyYAML's pure-Python parser.

    Every failure of the YAML library is a ConfigError: its reader refuses
    control characters (also in comments) when the loader is built, and its
    constructors raise plain ``ValueError`` (an impossible date such as
    ``2024-02-30``), ``KeyError`` or ``TypeError`` for a bad tagged value
    (``!!bool maybe``, ``!!int 1e3``), not YAML's own error type
    (CONSTRUCT_ERRORS).
    """
    lines: dict[str, int] = {}
    loader, node = None, None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is not None:
            _walk_nodes(node, name, "", lines, set())
        data = loader.construct_document(node) if node is not None else None
    except yaml.reader.ReaderError as exc:  # raised while the loader is built
        line = text.count("\n", 0, max(0, exc.position)) + 1
        raise ConfigError("yaml", f"U+{exc.character:04X}" if isinstance(exc.character, int)
                          else "byte", "control characters are not allowed in YAML, "
                          "not even in comments", source=f"{name}:{line}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}" if mark else name
        text = "; ".join(str(x) for x in (exc.context, exc.problem) if x) or str(exc)
        raise ConfigError("yaml", "syntax error", text, source=where) from None
    except yaml.YAMLError as exc:
        raise ConfigError("yaml", "syntax error", str(exc), source=name) from None
    except RecursionError:
        raise ConfigError("document", "deeply nested", "is nested too deeply to be a "
                          "configuration", source=name) from None
    except CONSTRUCT_ERRORS as exc:
        if isinstance(exc, ConfigError):
            raise
        path, value = _bad_scalar(node) if node is not None else ("document", "bad value")
        raise ConfigError(path, value, f"cannot be read as a YAML value: {exc}",
                          source=f"{name}:{lines[path]}" if path in lines else name) from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        raise ConfigError("document", "empty file", "expected a YAML mapping", source=name)
    if not isinstance(data, dict):
        raise ConfigError("document", type(data).__name__, "expected a YAML mapping at top level",
                          source=name)
    _count_values(data, name)
    return data, lines


def shipped_dirs(kind: str) -> list[Path]:
    """Folders holding the shipped ``kind`` documents (``workloads``, ``topologies``, ``sweeps``).

    A source checkout (or editable install) has them at the repository root; an
    installed wheel has them as package data under ``simulator/shipped/``.
    """
    bases = (REPO_ROOT / SEARCH_DIRS[kind], INSTALLED_ROOT / SEARCH_DIRS[kind])
    return [b for b in bases if b.is_dir()]


def shipped_names(kind: str) -> list[str]:
    """Every shipped name of ``kind``, sorted (the first folder wins on a clash)."""
    return sorted({p.stem for base in shipped_dirs(kind) for p in base.glob("*.yaml")})


def is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name the OS refuses (too long, too deep, NUL)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def resolve_path(ref: str | Path, kind: str) -> Path:
    """A path as given, or a shipped name (``dgx-h100``) looked up in the shipped folders,
    then in ``./topologies`` (``./workloads``, ``./sweeps``) of the working directory."""
    path = Path(ref)
    if is_file(path):
        return path
    for base in (*shipped_dirs(kind), Path.cwd() / SEARCH_DIRS[kind]):
        for cand in (base / f"{ref}.yaml", base / str(ref)):
            if is_file(cand):
                return cand
    shipped = shipped_names(kind)
    hint = did_you_mean(str(ref)[:200], shipped)
    raise ConfigError(ARG_NAMES[kind], str(ref),
                      f"no such file or shipped name{hint}; shipped: {', '.join(shipped)}")


def read_document(ref: str | Path | dict, kind: str) -> tuple[dict, dict[str, int], str]:
    """Load a document from a dict, a path or a shipped name.

    A workload's ``model: {hf_config: PATH}`` is expanded here
    (:mod:`.hf`), PATH relative to the YAML file's folder.
    """
    if isinstance(ref, dict):
        data, lines, source, base = ref, {}, "<dict>", None
    elif isinstance(ref, str | Path):
        path = resolve_path(ref, kind)
        text = read_text(path, ARG_NAMES[kind], str(ref))
        data, lines = parse_yaml(text, str(path))
        source, base = str(path), path.resolve().parent
    else:
        raise ConfigError(ARG_NAMES[kind], type(ref).__name__,
                          "expected a path, a shipped name, a dict or a config object")
    if kind == "workloads":
        data = expand_hf_config(data, base)
    return data, lines, source


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
    except CONSTRUCT_ERRORS as exc:  # 2024-02-30, !!int 1e3, !!bool maybe
        raise ConfigError(key, raw, f"cannot be read as a YAML value: {exc}",
                          source="override") from None
    return key, value


def apply_overrides(data: dict, overrides: dict[str, Any] | None) -> dict:
    """Return a deep copy of ``data`` with dotted-path overrides applied."""
    out = _deep_copy(data)
    for dotted, value in (overrides or {}).items():
        parts = str(dotted).split(".")
        if not all(parts):
            raise ConfigError("override", f"{dotted}={value!r}", "the field path needs a "
                              "name between the dots, before and after them (e.g. "
                              "parallelism.tensor)")
        node: Any = out
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


def _deep_copy(obj: Any, depth: int = 0) -> Any:
    """Copy dicts and lists; refuse nesting deeper than MAX_DEPTH (a dict from Python
    can nest arbitrarily; a configuration is a few levels deep)."""
    if depth > MAX_DEPTH:
        raise ConfigError("document", "deeply nested",
                          f"is nested more than {MAX_DEPTH} levels deep; not a configuration")
    if isinstance(obj, dict):
        return {k: _deep_copy(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_copy(v, depth + 1) for v in obj]
    return obj


def validate_model(cls: type[M], data: dict, lines: dict[str, int], source: str,
                   overridden: Iterable[str] = ()) -> M:
    """Validate (pydantic-core); translate the first error into a ConfigError.

    ``overridden``: dotted paths set by overrides; errors inside them are
    reported as coming from ``override`` rather than from a line of the file.
    """
    where = _Where(lines, source, tuple(str(k) for k in overridden))
    try:
        return cls.model_validate(data)
    except ConfigError as exc:
        raise where.attach(exc) from None
    except ValidationError as exc:
        raise _translate(cls, exc, where) from None


class _Where:
    """Turns a dotted field path into ``file:line`` or ``override``."""

    def __init__(self, lines: dict[str, int], source: str, overridden: tuple[str, ...]):
        self.lines, self.source, self.overridden = lines, source, overridden

    def __call__(self, path: str) -> str:
        if any(path == k or path.startswith(k + ".") for k in self.overridden):
            return "override"
        parts = path.split(".")
        while parts:  # the line of the field, else of its nearest section
            line = self.lines.get(".".join(parts))
            if line:
                return f"{self.source}:{line}"
            parts.pop()
        return self.source

    def attach(self, exc: ConfigError) -> ConfigError:
        if exc.source:
            return exc
        path = exc.field.replace("[", ".").replace("]", "")
        return ConfigError(exc.field, exc.value, exc.allowed, source=self(path))


_MESSAGES = {
    "model_type": "must be a section of fields (a YAML mapping)",
    "dict_type": "must be a YAML mapping",
    "list_type": "must be a list",
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string (quote it in YAML)",
}


def _translate(cls: type[Schema], exc: ValidationError, where: _Where) -> ConfigError:
    errors = exc.errors()
    # An unknown key usually explains a "missing" one (a typo): report it first.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    original = (err.get("ctx") or {}).get("error")
    if isinstance(original, ConfigError):
        return where.attach(original)
    loc = [str(p) for p in err["loc"]]
    path, kind, value = ".".join(loc), err["type"], err.get("input")
    source = where(path)
    if kind == "extra_forbidden":
        allowed = _fields_at(cls, loc[:-1])
        hint = did_you_mean(loc[-1], allowed)
        this, keys, other = SECTIONS.get(cls, ("", set(), ""))
        top = {str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"}
        if len(loc) == 1 and top & keys:
            hint += f" (this looks like a {other} document, not a {this} document)"
        return ConfigError(path, value, f"unknown field{hint}; allowed here: {', '.join(allowed)}",
                           source=source)
    if kind == "missing":
        return ConfigError(path, None, "is required but missing", source=source)
    if kind == "literal_error":
        return ConfigError(path, value, f"must be one of {err['ctx']['expected']}", source=source)
    text = _MESSAGES.get(kind) or err["msg"].replace("Input should", "must")
    return ConfigError(path, value, text, source=source)


def _fields_at(cls: type[Schema], loc: list[str]) -> list[str]:
    model: Any = cls
    for part in loc:
        if part.isdigit():
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return []
        model = submodel(field.annotation)
        if model is None:
            return []
    return sorted(model.model_fields) if hasattr(model, "model_fields") else []


def submodel(annotation: Any) -> Any:
    """The config section inside an annotation such as ``MoEConfig | None``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, Schema):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = submodel(arg)
        if found is not None:
            return found
    return None


def did_you_mean(word: str, choices: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or an empty string."""
    import difflib  # on a mistake only: not worth loading on every clean start

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _load(cls: type[M], ref: Any, overrides: dict[str, Any] | None, kind: str) -> M:
    if isinstance(ref, cls):
        if not overrides:
            return ref
        ref = ref.model_dump()
    data, lines, source = read_document(ref, kind)
    return validate_model(cls, apply_overrides(data, overrides), lines, source,
                          overridden=(overrides or {}).keys())


def load_workload(ref: str | Path | dict | Workload,
                  overrides: dict[str, Any] | None = None) -> Workload:
    """Workload from a path, shipped name, dict or object, with dotted overrides."""
    return _load(Workload, ref, overrides, "workloads")


def load_topology(ref: str | Path | dict | TopologyConfig,
                  overrides: dict[str, Any] | None = None) -> TopologyConfig:
    """Topology from a path, shipped name, dict or object, with dotted overrides."""
    return _load(TopologyConfig, ref, overrides, "topologies")
