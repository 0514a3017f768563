"""Bounded config numbers (simulator/config/bounds.py) validate exactly as pydantic's own
``Field`` limits: same accepted values, same error types, messages and context."""

from __future__ import annotations

import math
from typing import Annotated, get_args

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from simulator.config import bounds, topology, workload
from simulator.config.bounds import Bounds

STRICT = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)
LIMITS = ("gt", "ge", "lt", "le")
PROBES = [0, 1, -1, 0.5, 1e-7, 0.999999, 1.0, 16, 17, 2**40, 2**40 + 1, 1e9, 1e9 + 1, 3.5,
          "3", "x", True, None, math.nan, math.inf, -math.inf, [1]]


def _aliases():
    for module in (topology, workload):
        for name, value in vars(module).items():
            meta = get_args(value)[1:] if get_args(value) else ()
            if any(isinstance(m, Bounds) for m in meta):
                yield f"{module.__name__.rsplit('.', 1)[-1]}.{name}", value


def _outcome(model: type[BaseModel], value):
    try:
        return ("ok", model(v=value).v)
    except ValidationError as e:
        return ("error", [(d["type"], d["msg"], d.get("ctx")) for d in e.errors()])


@pytest.mark.parametrize("name, alias", list(_aliases()))
def test_bounded_alias_validates_like_field_limits(name, alias):
    base, meta = get_args(alias)[0], get_args(alias)[1]
    limits = {k: v for k, v in meta.schema.items() if k in LIMITS}
    ours = create_model("Ours", __config__=STRICT, v=(alias, ...))
    ref = create_model("Ref", __config__=STRICT, v=(Annotated[base, Field(**limits)], ...))
    for value in PROBES:
        assert _outcome(ours, value) == _outcome(ref, value), (name, value)


def test_every_schema_alias_is_found_and_bounded():
    names = dict(_aliases())
    assert {"topology.Rate", "topology.Fraction", "workload.Layers",
            "workload.Dropout"} <= set(names)
    assert all(get_args(a)[1].schema.keys() & set(LIMITS) for a in names.values())


def test_optional_bounded_field_keeps_none_and_the_limits():
    m = create_model("M", __config__=STRICT, v=(workload.Width | None, None))
    assert m().v is None
    with pytest.raises(ValidationError) as e:
        m(v=0)
    assert e.value.errors()[0]["type"] == "greater_than"


def test_repr_names_the_limits():
    assert repr(get_args(bounds.real(ge=0, le=1))[1]) == "Bounds(float, {'ge': 0, 'le': 1})"
