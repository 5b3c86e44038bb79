"""Type information for state descriptors, with PyFlink's ``Types`` factory names.

A descriptor's type decides two things: which serializer stores the value, and which Python values may be written
(and are expected back when reading). Plain Python types are accepted wherever a ``TypeInformation`` is
(``ValueStateDescriptor("count", int)``), and so is any object with ``serialize``/``deserialize`` methods.
"""

from __future__ import annotations

import datetime as _dt
import decimal
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from keyedstate.errors import ConfigurationError
from keyedstate.serialization import DEFAULT_CODEC, PickleValueCodec, TypeSerializer

__all__ = ["TypeInformation", "Types", "to_type_information"]


def _any_value(value: Any) -> bool:
    return True


@dataclass(frozen=True)
class TypeInformation:
    """What a state holds: a stable name (recorded in snapshots), a value check and a serializer."""

    name: str
    accepts: Callable[[Any], bool] = field(default=_any_value, compare=False, repr=False)
    serializer: TypeSerializer = field(default=DEFAULT_CODEC, compare=False, repr=False)
    components: tuple["TypeInformation", ...] = field(default=(), compare=False, repr=False)
    """The types inside a composite type (a ROW's fields, a LIST's element, a MAP's key and value), in order."""
    field_defaults: Mapping[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """A ROW's values for fields that stored rows lack (state schema evolution): by name for a named row, by
    position for a positional one. Not part of :attr:`name`, so changing a default never changes the type."""

    def check(self, value: Any) -> bool:
        return value is None or self.accepts(value)

    @property
    def accepts_any(self) -> bool:
        """Whether every value is admitted, so writers can skip the check entirely."""
        return self.accepts is _any_value

    @property
    def exact_types(self) -> frozenset[type]:
        """Types whose instances ``accepts`` always admits, so hot paths can test ``type(value) in exact_types``
        before paying for the Python call to ``accepts``. Empty when unknown."""
        return getattr(self.accepts, "exact_types", frozenset())

    def __str__(self) -> str:
        return self.name


def _exact(*types: type) -> Callable[[Any], bool]:
    def accepts(value: Any) -> bool:
        if type(value) is bool:
            return bool in types
        return isinstance(value, types)

    # bool is a subclass of int but only admitted when listed, so it belongs here only when listed.
    accepts.exact_types = frozenset(types)  # type: ignore[attr-defined]
    return accepts


def _instances_of(cls: type) -> Callable[[Any], bool]:
    def accepts(value: Any) -> bool:
        return isinstance(value, cls)

    accepts.exact_types = frozenset((cls,))  # type: ignore[attr-defined]
    return accepts


_NUMBER_LIKE = (int, float)


def _scalar(name: str, *types: type) -> staticmethod[[], TypeInformation]:
    """A ``Types`` factory whose values are the instances of ``types``."""
    def factory() -> TypeInformation:
        return TypeInformation(name, _exact(*types))

    factory.__name__, factory.__qualname__ = name, f"Types.{name}"
    return staticmethod(factory)


class Types:
    """PyFlink-compatible type factories (``Types.LONG()``, ``Types.MAP(Types.STRING(), Types.INT())``, ...)."""

    BOOLEAN = _scalar("BOOLEAN", bool)
    BYTE = _scalar("BYTE", int)
    SHORT = _scalar("SHORT", int)
    INT = _scalar("INT", int)
    LONG = _scalar("LONG", int)
    BIG_INT = _scalar("BIG_INT", int)
    FLOAT = _scalar("FLOAT", *_NUMBER_LIKE)
    DOUBLE = _scalar("DOUBLE", *_NUMBER_LIKE)
    BIG_DEC = _scalar("BIG_DEC", decimal.Decimal, int)
    STRING = _scalar("STRING", str)
    CHAR = _scalar("CHAR", str)
    SQL_TIMESTAMP = _scalar("SQL_TIMESTAMP", _dt.datetime)
    LOCAL_DATE_TIME = _scalar("LOCAL_DATE_TIME", _dt.datetime)
    INSTANT = _scalar("INSTANT", _dt.datetime)

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: Any = None) -> TypeInformation:
        element = to_type_information(element_type) if element_type is not None else None
        if element is not None and element.name == "BYTE":
            return TypeInformation("PRIMITIVE_ARRAY<BYTE>", _exact(bytes, bytearray))
        return TypeInformation(f"PRIMITIVE_ARRAY<{element}>", _exact(list, tuple))

    @staticmethod
    def BASIC_ARRAY(element_type: Any) -> TypeInformation:
        element = to_type_information(element_type)
        return TypeInformation(f"BASIC_ARRAY<{element}>", _exact(list, tuple), components=(element,))

    @staticmethod
    def OBJECT_ARRAY(element_type: Any) -> TypeInformation:
        element = to_type_information(element_type)
        return TypeInformation(f"OBJECT_ARRAY<{element}>", _exact(list, tuple), components=(element,))

    @staticmethod
    def LIST(element_type: Any) -> TypeInformation:
        element = to_type_information(element_type)
        return TypeInformation(f"LIST<{element}>", _exact(list), components=(element,))

    @staticmethod
    def MAP(key_type: Any, value_type: Any) -> TypeInformation:
        key, value = to_type_information(key_type), to_type_information(value_type)
        return TypeInformation(f"MAP<{key},{value}>", _exact(dict), components=(key, value))

    @staticmethod
    def TUPLE(field_types: list[Any]) -> TypeInformation:
        types = tuple(to_type_information(t) for t in field_types)
        return TypeInformation(f"TUPLE<{','.join(map(str, types))}>", _exact(tuple), components=types)

    @staticmethod
    def ROW(field_types: list[Any], defaults: Optional[Mapping[int, Any]] = None) -> TypeInformation:
        """A row of positional fields. ``defaults`` (keyedstate extension): ``{position: value}`` for fields
        appended since state was stored (a stored row without them reads them as this value, else None)."""
        types = tuple(to_type_information(t) for t in field_types)
        return TypeInformation(f"ROW<{','.join(map(str, types))}>", _exact(tuple, list), components=types,
                               field_defaults=dict(defaults or {}))

    @staticmethod
    def ROW_NAMED(field_names: list[str], field_types: list[Any],
                  defaults: Optional[Mapping[str, Any]] = None) -> TypeInformation:
        """A row of named fields (written as a dict, or a tuple/list in field order). ``defaults`` (keyedstate
        extension): ``{field name: value}`` for fields added since state was stored (else they read as None)."""
        types = tuple(to_type_information(t) for t in field_types)
        fields = ",".join(f"{n}:{t}" for n, t in zip(field_names, types))
        unknown = set(defaults or {}) - set(field_names)
        if unknown:
            raise ConfigurationError(f"ROW_NAMED defaults name fields the row does not have: {sorted(unknown)}")
        return TypeInformation(f"ROW<{fields}>", _exact(tuple, list, dict), components=types,
                               field_defaults=dict(defaults or {}))

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        return TypeInformation("SQL_DATE", lambda v: isinstance(v, _dt.date) and not isinstance(v, _dt.datetime))

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return TypeInformation("PICKLED_BYTE_ARRAY", serializer=PickleValueCodec())

    @staticmethod
    def ANY() -> TypeInformation:
        """Any value, stored with the default codec (keyedstate extension; PyFlink has no equivalent)."""
        return TypeInformation("ANY")


_PYTHON_TYPES: dict[type, Callable[[], TypeInformation]] = {
    bool: Types.BOOLEAN,
    int: Types.LONG,
    float: Types.DOUBLE,
    str: Types.STRING,
    bytes: lambda: TypeInformation("BYTES", _exact(bytes, bytearray)),
    decimal.Decimal: Types.BIG_DEC,
    _dt.datetime: Types.SQL_TIMESTAMP,
    _dt.date: Types.SQL_DATE,
    list: lambda: TypeInformation("list", _exact(list)),
    tuple: lambda: TypeInformation("tuple", _exact(tuple)),
    dict: lambda: TypeInformation("dict", _exact(dict)),
    set: lambda: TypeInformation("set", _exact(set)),
    object: Types.ANY,
}


def to_type_information(type_info: Any) -> TypeInformation:
    """Accept a ``TypeInformation``, a Python type, a serializer object, or ``None`` (any value)."""
    if isinstance(type_info, TypeInformation):
        return type_info
    if type_info is None:
        return Types.ANY()
    if isinstance(type_info, type):
        factory = _PYTHON_TYPES.get(type_info)
        if factory is not None:
            return factory()
        cls = type_info
        return TypeInformation(f"{cls.__module__}.{cls.__qualname__}", _instances_of(cls))
    if callable(getattr(type_info, "serialize", None)) and callable(getattr(type_info, "deserialize", None)):
        name = getattr(type_info, "name", None) or type(type_info).__qualname__
        return TypeInformation(f"serializer:{name}", serializer=type_info)
    raise ConfigurationError(
        f"{type_info!r} is not a type: pass a Python type (int, str, dict, a class), a keyedstate.Types "
        f"factory result such as Types.LONG(), or an object with serialize()/deserialize() methods"
    )
