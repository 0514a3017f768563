"""Copies of frozen op records with a few fields changed, cheaply.

A layer's backward, its recompute and its FP8 quantisation kernels are each derived from
the forward's ops (:mod:`.ops`, :mod:`.fp8`): the same record with a new name and a
scaled FLOP or byte count. ``dataclasses.replace`` does that through the generic path
(field introspection, keyword arguments, ``__init__``), about four times the cost of
filling the new instance's dict directly, which gives an equal record field for field
(the records have no ``__post_init__`` and no slots). A plan derives a few hundred.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def derive(op: T, **changes: object) -> T:
    """``dataclasses.replace(op, **changes)`` for a frozen dataclass without
    ``__post_init__`` or slots; ``changes`` must name its fields."""
    assert changes.keys() <= op.__dict__.keys(), f"not fields of {type(op).__name__}: " \
        f"{sorted(changes.keys() - op.__dict__.keys())}"
    new = object.__new__(type(op))
    fields = new.__dict__  # frozen: fill the instance dict, as __init__ would
    fields.update(op.__dict__)
    fields.update(changes)
    return new
