"""Bounded numbers for the config schema, as prebuilt pydantic-core schemas.

``Annotated[float, Field(ge=0, le=1)]`` is the usual way to bound a field, but pydantic then
rebuilds the bounded number's core schema for every field that uses it, walking the
annotated-types metadata through several ``isinstance`` checks against runtime protocols
(slow on Python 3.11). Measured on the 2-core development box: ~0.27 ms per bounded field
against ~0.03 ms for a plain one, about 30 ms of every ``clustersim run`` for the ~120
bounded fields of the workload and topology schemas (issue 16's start-up budget).

:class:`Bounds` hands pydantic the finished core schema (``float_schema`` /
``int_schema`` with the same ``gt``/``ge``/``lt``/``le`` and, for floats, the schema's
``allow_inf_nan=False``), so validation, error types, messages and context are exactly
those of the ``Field`` spelling (``tests/test_config_bounds.py`` compares them).
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
