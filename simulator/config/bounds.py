"""Bounded numbers for the config schema, as prebuilt pydantic-core schemas.

A bounded field is declared ``Layers = integer(gt=0, le=MAX_LAYERS)``: ``Annotated[int,
Bounds(...)]`` whose :class:`Bounds` holds the finished core schema (``float_schema`` /
``int_schema`` with the same ``gt``/``ge``/``lt``/``le`` and, for floats,
``allow_inf_nan=False``). :mod:`.schema` puts that schema into a section's validator as it
is; a pydantic model given the same annotation uses it through
``__get_pydantic_core_schema__`` (the test mirrors do). Validation, error types, messages
and context are exactly those of pydantic's ``Field(ge=..., le=...)`` spelling
(``tests/test_config_bounds.py`` compares them), which pydantic would rebuild per field
through annotated-types' runtime protocols (~0.27 ms per bounded field on the 2-core
development box, against ~0.03 ms for a plain one).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic_core import CoreSchema, core_schema


class Bounds:
    """Field metadata that is its own core schema: a number with optional limits."""

    __slots__ = ("schema",)

    def __init__(self, schema: CoreSchema) -> None:
        self.schema = schema

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> CoreSchema:
        return dict(self.schema)  # a copy: pydantic may annotate the schema it is given

    def __repr__(self) -> str:
        limits = {k: self.schema[k] for k in ("gt", "ge", "lt", "le") if k in self.schema}
        return f"Bounds({self.schema['type']}, {limits})"


def real(*, gt: float | None = None, ge: float | None = None, lt: float | None = None,
         le: float | None = None) -> Any:
    """A finite float within the given limits (NaN and infinities rejected)."""
    return Annotated[float, Bounds(core_schema.float_schema(
        gt=gt, ge=ge, lt=lt, le=le, allow_inf_nan=False))]


def integer(*, gt: int | None = None, ge: int | None = None, lt: int | None = None,
            le: int | None = None) -> Any:
    """An int within the given limits (pydantic's lax int: 3, 3.0 and "3" are 3)."""
    return Annotated[int, Bounds(core_schema.int_schema(gt=gt, ge=ge, lt=lt, le=le))]
