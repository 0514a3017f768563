"""Config sections as plain classes validated by pydantic-core, without pydantic's model layer.

Every ``clustersim run`` validates a workload and a topology. Declared as pydantic
``BaseModel`` classes, the schema made each start import pydantic's model machinery
(``pydantic.main``, ``fields``, ``types``, ``json_schema``, ``annotated_types``: ~75 ms on the
2-core development box, beyond the ``import pydantic`` of the start-up floor) and build
thirteen models through pydantic's schema generator (~40 ms more). That was most of what
kept ``clustersim run`` above 1.6x the import floor (issue 16).

A :class:`Schema` subclass is declared the same way (annotated fields with defaults, a
``@check`` method for cross-field rules) and validated by the same engine:
:meth:`Schema._core_schema` writes the pydantic-core schema that pydantic itself would
generate for these field types (``model_schema`` over ``model_fields_schema``, each
default a ``with_default_schema``, ``X | None`` a ``nullable_schema``, each ``@check`` a
``no_info_after_validator_function`` around the model, in declaration order) and hands it
to :class:`pydantic_core.SchemaValidator`. Inputs, coercions, error types, messages and
locations are therefore pydantic's (``tests/test_config_schema.py`` validates every shipped
document and a set of bad ones through both and compares). Instances keep the ``BaseModel``
surface the rest of the code uses: attribute access, ``model_validate``, ``model_dump`` /
``model_dump_json`` (pydantic-core's serializer over the same schema), ``model_copy``,
``model_fields``, equality, hashing, pickling; they are frozen.

The validator and serializer of a class are built on first use, so ``import simulator``
pays only for the class statements. Supported field types are what the config uses:
``str``, ``bool``, ``int``, ``float``, bounded numbers (:mod:`.bounds`), ``Literal``,
``X | None``, ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]`` and nested schemas; anything
else is a ``TypeError`` when the class is first used, not a silent pass.
"""

from __future__ import annotations

import copy
import inspect
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, get_args, get_origin

from pydantic_core import PydanticUndefined, SchemaSerializer, SchemaValidator, core_schema

from .bounds import Bounds

CONFIG = core_schema.CoreConfig(extra_fields_behavior="forbid", validate_default=True,
                                allow_inf_nan=False)
_CHECK = "__schema_check__"


def check(method: Callable[[Any], None]) -> Callable[[Any], None]:
    """Mark a method as a cross-field rule, run after the fields validate (pydantic's
    ``model_validator(mode="after")``). It raises (``ConfigError``) or returns nothing."""
    setattr(method, _CHECK, True)
    return method


class Field:
    """A default that needs more than ``= value``: a factory, or length limits."""

    __slots__ = ("default", "default_factory", "max_length", "min_length")

    def __init__(self, default: Any = PydanticUndefined, *,
                 default_factory: Callable[[], Any] | None = None,
                 min_length: int | None = None, max_length: int | None = None) -> None:
        self.default, self.default_factory = default, default_factory
        self.min_length, self.max_length = min_length, max_length


class FieldInfo:
    """One field as :attr:`Schema.model_fields` lists it: ``hint`` as declared (bounds
    included), ``annotation`` without its bounds, and the declaration's :class:`Field`."""

    __slots__ = ("annotation", "hint", "spec")

    def __init__(self, hint: Any, spec: Field) -> None:
        self.hint, self.spec = hint, spec
        self.annotation = get_args(hint)[0] if get_origin(hint) is Annotated else hint

    @property
    def default(self) -> Any:
        """The default value (``PydanticUndefined`` when required or made by a factory)."""
        return self.spec.default

    def is_required(self) -> bool:
        return self.spec.default is PydanticUndefined and self.spec.default_factory is None

    def __repr__(self) -> str:
        return f"FieldInfo(annotation={self.annotation!r}, required={self.is_required()})"


class _ModelFields:
    """``Cls.model_fields``: the fields by name, in declaration order, resolved on first use."""

    def __get__(self, obj: Any, owner: type[Schema]) -> dict[str, FieldInfo]:
        return owner._fields()


def _type_schema(hint: Any, spec: Field | None = None) -> core_schema.CoreSchema:
    """The pydantic-core schema of one field type (see the module docstring)."""
    origin, args = get_origin(hint), get_args(hint)
    limits = {} if spec is None else {k: v for k in ("min_length", "max_length")
                                      if (v := getattr(spec, k)) is not None}
    if origin is Annotated:
        bounds = [m for m in args[1:] if isinstance(m, Bounds)]
        if len(bounds) != 1 or len(args) != 2:
            raise TypeError(f"unsupported annotation {hint!r}: Annotated[T, Bounds] only")
        return dict(bounds[0].schema)  # type: ignore[return-value]
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            raise TypeError(f"unsupported union {hint!r}: only X | None")
        return core_schema.nullable_schema(_type_schema(rest[0], spec))
    if origin is Literal:
        return core_schema.literal_schema(list(args))
    if origin is list:
        return core_schema.list_schema(_type_schema(args[0]), **limits)
    if origin is tuple:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"unsupported tuple {hint!r}: only tuple[X, ...]")
        return core_schema.tuple_schema([_type_schema(args[0])], variadic_item_index=0,
                                        **limits)
    if origin is dict:
        return core_schema.dict_schema(_type_schema(args[0]), _type_schema(args[1]), **limits)
    if isinstance(hint, type) and issubclass(hint, Schema):
        return hint._core_schema()
    plain = {str: core_schema.str_schema, bool: core_schema.bool_schema,
             int: core_schema.int_schema, float: core_schema.float_schema}
    if hint is Any:
        return core_schema.any_schema()
    if hint in plain:
        return plain[hint](**limits)
    raise TypeError(f"unsupported field type {hint!r}")


class Schema:
    """Base of the config sections (see the module docstring)."""

    # pydantic-core's model validator stores a validated instance's state in these.
    __slots__ = ("__dict__", "__pydantic_extra__", "__pydantic_fields_set__",
                 "__pydantic_private__")
    model_fields: ClassVar[dict[str, FieldInfo]] = _ModelFields()  # type: ignore[assignment]
    _specs: ClassVar[dict[str, Field]]
    _checks: ClassVar[tuple[Callable[[Any], None], ...]]
    _resolved: ClassVar[dict[str, FieldInfo] | None]
    _schema: ClassVar[core_schema.CoreSchema | None]
    _validator: ClassVar[SchemaValidator | None]
    _serializer: ClassVar[SchemaSerializer | None]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if len(cls.__mro__) != 3:
            raise TypeError(f"{cls.__name__}: a Schema subclass cannot be subclassed")
        specs = {}
        for name in inspect.get_annotations(cls):
            value = cls.__dict__.get(name, PydanticUndefined)
            specs[name] = value if isinstance(value, Field) else Field(value)
            if name in cls.__dict__:
                delattr(cls, name)  # instances hold the values; the class holds none
        cls._specs = specs
        cls._checks = tuple(f for f in cls.__dict__.values() if getattr(f, _CHECK, False))
        cls._resolved = cls._schema = cls._validator = cls._serializer = None

    # -- the schema, built on first use -------------------------------------------------
    @classmethod
    def _fields(cls) -> dict[str, FieldInfo]:
        if cls._resolved is None:
            hints = inspect.get_annotations(cls, eval_str=True)  # in the module's namespace
            cls._resolved = {n: FieldInfo(hints[n], spec) for n, spec in cls._specs.items()}
        return cls._resolved

    @classmethod
    def _core_schema(cls) -> core_schema.CoreSchema:
        if cls._schema is None:
            fields = {}
            for name, info in cls._fields().items():
                spec = info.spec
                inner = _type_schema(info.hint, spec)
                if spec.default_factory is not None:
                    inner = core_schema.with_default_schema(
                        inner, default_factory=spec.default_factory)
                elif spec.default is not PydanticUndefined:
                    inner = core_schema.with_default_schema(inner, default=spec.default)
                fields[name] = core_schema.model_field(inner)
            schema: core_schema.CoreSchema = core_schema.model_schema(
                cls, core_schema.model_fields_schema(fields, model_name=cls.__name__),
                config=cls._config())
            for rule in cls._checks:
                schema = core_schema.no_info_after_validator_function(_after(rule), schema)
            cls._schema = schema
        return cls._schema

    @classmethod
    def _config(cls) -> core_schema.CoreConfig:
        return core_schema.CoreConfig(**CONFIG, title=cls.__name__)  # names its errors

    @classmethod
    def _validate(cls) -> SchemaValidator:
        if cls._validator is None:
            cls._validator = SchemaValidator(cls._core_schema(), cls._config())
        return cls._validator

    @classmethod
    def _serialize(cls) -> SchemaSerializer:
        if cls._serializer is None:
            cls._serializer = SchemaSerializer(cls._core_schema(), cls._config())
        return cls._serializer

    # -- the BaseModel surface the code uses ---------------------------------------------
    def __init__(self, **data: Any) -> None:
        type(self)._validate().validate_python(data, self_instance=self)

    @classmethod
    def model_validate(cls, obj: Any) -> Any:
        """A validated instance from a mapping (or an instance, returned as it is)."""
        return cls._validate().validate_python(obj)

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]:
        """Every field as plain data (``mode="json"``: JSON types only), as pydantic does."""
        return type(self)._serialize().to_python(self, mode=mode)

    def model_dump_json(self) -> str:
        """Every field as compact JSON text, as pydantic does."""
        return type(self)._serialize().to_json(self).decode()

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy with ``update`` applied unvalidated (pydantic's ``model_copy``)."""
        state = copy.deepcopy(self.__dict__) if deep else dict(self.__dict__)
        state.update(update or {})
        out = type(self).__new__(type(self))
        _set_state(out, state, self.__pydantic_fields_set__ | set(update or ()))
        return out

    @property
    def model_fields_set(self) -> set[str]:
        return self.__pydantic_fields_set__

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"{type(self).__name__} is frozen: build a new one with "
                        f"model_copy(update={{{name!r}: ...}})")

    def __delattr__(self, name: str) -> None:
        raise TypeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.values()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({inner})"

    def __getstate__(self) -> dict[str, Any]:
        return {"__dict__": self.__dict__, "fields_set": self.__pydantic_fields_set__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _set_state(self, dict(state["__dict__"]), set(state["fields_set"]))


def _set_state(obj: Schema, values: dict[str, Any], fields_set: set[str]) -> None:
    """Fill a new instance as pydantic-core does (bypassing the frozen ``__setattr__``)."""
    put = object.__setattr__
    put(obj, "__dict__", values)
    put(obj, "__pydantic_fields_set__", fields_set)
    put(obj, "__pydantic_extra__", None)
    put(obj, "__pydantic_private__", None)


def _after(rule: Callable[[Any], None]) -> Callable[[Any], Any]:
    """A ``@check`` method as an after-validator: run it, pass the instance on."""
    def validator(obj: Any) -> Any:
        rule(obj)
        return obj

    validator.__name__ = validator.__qualname__ = rule.__qualname__
    return validator
