"""The config sections (simulator/config/schema.py) validate exactly as pydantic models would.

Each :class:`Schema` class is mirrored by a pydantic ``BaseModel`` made from the same
declarations (``create_model``: same field types, defaults, limits, config and
``@check`` rules as ``model_validator(mode="after")``). Every shipped workload and
topology, and a set of broken variants of each (every leaf set to wrong values, every
section given an unknown key, every key removed), must give the same result through
both: the same dumped values, or the same errors (type, location, message, input).
"""

from __future__ import annotations

import copy
import pickle
import types
import typing
from typing import Annotated, Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic import Field as PydanticField

from simulator.config import TopologyConfig, Workload, topology, workload
from simulator.config.loader import read_document, shipped_names
from simulator.config.schema import Field, Schema

STRICT = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)
BAD = ["x", -1, 0, 2.5, None, True, 1e30, float("nan"), [1], {"a": 1}]
_MIRRORS: dict[type, type[BaseModel]] = {}


def _swap(hint: Any) -> Any:
    """The annotation with every Schema class replaced by its pydantic mirror."""
    if isinstance(hint, type) and issubclass(hint, Schema):
        return mirror(hint)
    origin, args = get_origin(hint), get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return typing.Union[tuple(_swap(a) for a in args)]  # noqa: UP007
    if origin is list:
        return list[_swap(args[0])]
    if origin in (Annotated, Literal, tuple, dict) or origin is None:
        return hint
    raise AssertionError(hint)


def _after(rule):
    def validator(self):
        rule(self)
        return self
    return model_validator(mode="after")(validator)


def mirror(cls: type[Schema]) -> type[BaseModel]:
    """A pydantic BaseModel declared like ``cls``."""
    if cls not in _MIRRORS:
        fields = {}
        for name, info in cls.model_fields.items():
            spec = info.spec
            kw = {k: getattr(spec, k) for k in ("min_length", "max_length")
                  if getattr(spec, k) is not None}
            if spec.default_factory is not None:
                kw["default_factory"] = spec.default_factory
            elif isinstance(spec.default, Schema):
                kw["default"] = mirror(type(spec.default)).model_validate(
                    spec.default.model_dump())
            elif not info.is_required():
                kw["default"] = spec.default
            fields[name] = (_swap(info.hint), PydanticField(**kw))
        namespace = {k: v for k, v in vars(cls).items()  # methods and properties
                     if callable(v) or isinstance(v, property)}
        namespace.update({f"check_{i}": _after(rule) for i, rule in enumerate(cls._checks)})
        namespace.update({k: f for k, (_, f) in fields.items()}, model_config=STRICT,
                         __annotations__={k: h for k, (h, _) in fields.items()},
                         __module__=__name__)
        _MIRRORS[cls] = type(cls.__name__, (BaseModel,), namespace)
    return _MIRRORS[cls]


def _outcome(cls: type, data: Any) -> tuple:
    try:
        obj = cls.model_validate(data)
    except ValidationError as e:
        return ("error", e.title, [(d["type"], d["loc"], d["msg"], repr(d.get("input")),
                                    {k: str(v) for k, v in (d.get("ctx") or {}).items()})
                                   for d in e.errors()])
    return ("ok", obj.model_dump(), obj.model_dump(mode="json"), obj.model_dump_json())


def _variants(doc: dict) -> list[Any]:
    """Broken copies of ``doc``: each leaf set to each BAD value, an unknown key in each
    section, each key removed."""
    out = []

    def walk(node: Any, path: tuple) -> None:
        if isinstance(node, dict):
            out.append((path, "unknown", None))
            for k, v in node.items():
                out.append(((*path, k), "remove", None))
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))
        else:
            out.extend((path, "set", bad) for bad in BAD)

    walk(doc, ())
    docs = []
    for path, kind, value in out:
        d = copy.deepcopy(doc)
        node = d
        for p in path[:-1] if kind != "unknown" else path:
            node = node[p]
        if kind == "unknown":
            node["no_such_field"] = 1
        elif kind == "remove":
            del node[path[-1]]
        else:
            node[path[-1]] = value
        docs.append(d)
    return docs


CASES = [(Workload, "workloads", n) for n in shipped_names("workloads")] + \
        [(TopologyConfig, "topologies", n) for n in shipped_names("topologies")]


@pytest.mark.parametrize("cls, kind, name", CASES, ids=[c[2] for c in CASES])
def test_shipped_documents_and_their_broken_variants_validate_as_pydantic(cls, kind, name):
    doc = read_document(name, kind)[0]
    assert _outcome(cls, doc)[0] == "ok"
    variants = [doc, *_variants(doc)]
    for d in variants:
        assert _outcome(cls, d) == _outcome(mirror(cls), d), d
    errors = sum(_outcome(cls, d)[0] == "error" for d in variants)
    assert errors > len(variants) // 2  # the variants do exercise the error paths


def test_fields_match_the_pydantic_declaration():
    for module in (workload, topology):
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Schema) and obj is not Schema:
                ref = mirror(obj).model_fields
                assert list(obj.model_fields) == list(ref)
                for name, info in obj.model_fields.items():
                    assert info.is_required() == ref[name].is_required(), (obj, name)


def test_instances_are_frozen_comparable_and_copyable():
    w = Workload.model_validate(read_document("llama3-8b", "workloads")[0])
    with pytest.raises(TypeError, match="frozen"):
        w.parallelism = None
    assert pickle.loads(pickle.dumps(w)) == w
    assert copy.deepcopy(w) == w and copy.copy(w) == w
    tp = 2 * w.parallelism.tensor
    c = w.model_copy(update={"parallelism": w.parallelism.model_copy(update={"tensor": tp})})
    assert c.parallelism.tensor == tp and w.parallelism.tensor != tp and c != w
    assert c.model_fields_set == w.model_fields_set
    assert hash(w.parallelism) == hash(w.parallelism.model_copy())
    assert Workload.model_validate(w) is w
    assert Workload(**w.model_dump()) == w


def test_unsupported_field_type_is_an_error_on_first_use():
    class Odd(Schema):
        value: set[int] = Field(default_factory=set)

    with pytest.raises(TypeError, match="unsupported field type"):
        Odd.model_validate({})
