"""The Spark types of key columns, as far as key hashing needs them (see :mod:`keyedstate.keygroups`).

A key's key group depends on the Spark types of its key columns, not only on their values: Spark hashes an ``int``
column's ``1`` as four bytes and a ``bigint`` column's ``1`` as eight, so the two land in different key groups.
:class:`KeyColumnType` names such a type; it is parsed from Spark's DDL type names (``"int"``, ``"decimal(10,2)"``,
``"array<string>"``), read from pyspark ``DataType`` objects (through their ``simpleString()``, so pyspark is never
imported here), or inferred from a harness key's Python values by :func:`infer_key_types`.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import functools
import re
from dataclasses import dataclass
from typing import Any, Iterable, Union

from keyedstate.errors import ConfigurationError, NullKeyError, UnsupportedKeyTypeError

__all__ = ["KeyColumnType", "KeyTypeSpec", "SUPPORTED_KEY_COLUMN_TYPES", "INFERRED_KEY_COLUMN_TYPES",
           "NAIVE_DATETIME_TYPE", "AWARE_DATETIME_TYPE", "key_column_type", "key_column_types", "infer_key_types"]

SUPPORTED_KEY_COLUMN_TYPES = (
    "boolean, tinyint, smallint, int, bigint, float, double, decimal(p,s), string (and varchar(n)), binary, date, "
    "timestamp, timestamp_ntz, void, and array<...> and struct<...> of these"
)

_ALIASES = {
    "boolean": "boolean", "bool": "boolean", "tinyint": "tinyint", "byte": "tinyint", "smallint": "smallint",
    "short": "smallint", "int": "int", "integer": "int", "bigint": "bigint", "long": "bigint", "float": "float",
    "real": "float", "double": "double", "string": "string", "binary": "binary", "date": "date",
    "timestamp": "timestamp", "timestamp_ltz": "timestamp", "timestamp_ntz": "timestamp_ntz", "void": "void",
    "null": "void", "decimal": "decimal", "dec": "decimal", "numeric": "decimal", "varchar": "string",
    "array": "array", "struct": "struct",
}
_MAX_DECIMAL_PRECISION = 38
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|'(?:[^'\\]|\\.)*'|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


@dataclass(frozen=True)
class KeyColumnType:
    """One key column's Spark type. ``name`` is Spark's simple type name (``"int"``, ``"decimal"``, ``"array"``...);
    ``precision`` and ``scale`` are set for decimals; ``children`` holds an array's element type or a struct's field
    types (``field_names`` their names, which do not change the hash)."""

    name: str
    precision: int = 0
    scale: int = 0
    children: tuple["KeyColumnType", ...] = ()
    field_names: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.name == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.name == "array":
            return f"array<{self.children[0]}>"
        if self.name == "struct":
            fields = zip(self.field_names, self.children)
            return "struct<" + ",".join(f"{_quoted(name)}:{child}" for name, child in fields) + ">"
        return self.name


def _quoted(name: str) -> str:
    return name if name.isidentifier() else "`" + name.replace("`", "``") + "`"


KeyTypeSpec = Union[KeyColumnType, str, Any]  # Any: a pyspark DataType or StructField


def _unsupported(text: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"key column type {text!r} {why}; key hashing supports {SUPPORTED_KEY_COLUMN_TYPES}. Cast the key column "
        f"to one of these in Spark (for example .cast('string')) and declare that type"
    )


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        end = 0
        while text[end:].strip():
            match = _TOKEN.match(text, end)
            if match is None:
                raise _unsupported(text, f"is not a Spark DDL type name (at {text[end:].strip()!r})")
            self.tokens.append(match.group(1))
            end = match.end()
        self.pos = 0

    def peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def take(self, expected: str = "") -> str:
        token = self.peek()
        if not token or (expected and token != expected):
            wanted = f"{expected!r}" if expected else "more"
            raise _unsupported(self.text, f"is not a Spark DDL type name (expected {wanted} at {token or 'the end'!r})")
        self.pos += 1
        return token

    def number(self) -> int:
        token = self.take()
        if not token.isdigit():
            raise _unsupported(self.text, f"is not a Spark DDL type name ({token!r} is not a number)")
        return int(token)

    def parse_type(self) -> KeyColumnType:
        word = self.take().lower()
        if word in ("char", "character"):
            raise _unsupported(self.text, "pads its values with spaces in Spark tables, so the value a harness sees "
                               "may not be the one Spark hashes")
        name = _ALIASES.get(word)
        if name is None:
            raise _unsupported(self.text, "cannot be hashed here" if word.isidentifier() else "is not a type name")
        if name == "decimal":
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take("(")
                precision = self.number()
                if self.peek() == ",":
                    self.take(",")
                    scale = self.number()
                self.take(")")
            if not (1 <= precision <= _MAX_DECIMAL_PRECISION and 0 <= scale <= precision):
                raise _unsupported(self.text, "is not a valid decimal (precision 1..38, scale 0..precision)")
            return KeyColumnType("decimal", precision, scale)
        if word == "varchar":
            self.take("(")
            self.number()
            self.take(")")
        elif name == "string" and self.peek().lower() == "collate":
            self.take()
            collation = self.take().strip("`")
            if collation.upper() != "UTF8_BINARY":
                raise _unsupported(self.text, "hashes the collation key of each value, not its UTF-8 bytes")
        if name == "array":
            self.take("<")
            element = self.parse_type()
            self.take(">")
            return KeyColumnType("array", children=(element,))
        if name == "struct":
            return self.parse_struct_fields()
        return KeyColumnType(name)

    def parse_struct_fields(self) -> KeyColumnType:
        self.take("<")
        names: list[str] = []
        types: list[KeyColumnType] = []
        while self.peek() != ">":
            if names:
                self.take(",")
            names.append(self.take().strip("`").replace("``", "`"))
            if self.peek() == ":":
                self.take(":")
            types.append(self.parse_type())
            while self.peek() and self.peek() not in (",", ">"):  # NOT NULL, COMMENT '...' do not change the hash
                self.take()
        self.take(">")
        return KeyColumnType("struct", children=tuple(types), field_names=tuple(names))


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> KeyColumnType:
    parser = _Parser(text)
    parsed = parser.parse_type()
    if parser.peek():
        raise _unsupported(text, f"is not a Spark DDL type name (unexpected {parser.peek()!r})")
    return parsed


def key_column_type(spec: KeyTypeSpec) -> KeyColumnType:
    """``spec`` as a :class:`KeyColumnType`: a Spark DDL type name (``"bigint"``, ``"decimal(12,2)"``), a pyspark
    ``DataType`` or ``StructField``, or a :class:`KeyColumnType`."""
    if type(spec) is KeyColumnType:
        return spec
    if isinstance(spec, str):
        return _parse(spec.strip())
    data_type = getattr(spec, "dataType", spec)  # a StructField stands for its type
    if hasattr(data_type, "elementType"):  # ArrayType, StructType: their simpleString does not quote field names
        return KeyColumnType("array", children=(key_column_type(data_type.elementType),))
    if hasattr(data_type, "fields") and hasattr(data_type, "simpleString"):
        return KeyColumnType("struct", children=tuple(key_column_type(f.dataType) for f in data_type.fields),
                             field_names=tuple(f.name for f in data_type.fields))
    simple_string = getattr(data_type, "simpleString", None)
    if callable(simple_string):
        return _parse(simple_string())
    raise ConfigurationError(
        f"a key column type must be a Spark DDL type name such as 'bigint', a pyspark DataType or a KeyColumnType, "
        f"got {spec!r}"
    )


def key_column_types(specs: Union[str, Iterable[KeyTypeSpec]]) -> tuple[KeyColumnType, ...]:
    """The types of all key columns, in key column order: a sequence of :func:`key_column_type` specs, a pyspark
    ``StructType`` (``df.select(*key_columns).schema``), or one spec for a single-column key."""
    if isinstance(specs, str) or type(specs) is KeyColumnType or not hasattr(specs, "__iter__"):
        return (key_column_type(specs),)
    types = tuple(key_column_type(spec) for spec in specs)
    if not types:
        raise ConfigurationError("a key has at least one column; got no key column types")
    return types


try:  # numpy comes with pandas; keys taken from pandas frames are often numpy scalars
    import numpy as _np

    _NUMPY_KINDS = {("b", 1): "boolean", ("i", 1): "tinyint", ("i", 2): "smallint", ("i", 4): "int",
                    ("i", 8): "bigint", ("f", 4): "float", ("f", 8): "double"}
    _NUMPY_GENERIC: tuple[type[Any], ...] = (_np.generic,)
except ImportError:  # pragma: no cover - numpy is a transitive dependency
    _NUMPY_KINDS = {}
    _NUMPY_GENERIC = ()

# pyspark infers DecimalType(38, 18) for every decimal.Decimal, whatever its digits: one type for the whole column.
INFERRED_KEY_COLUMN_TYPES: dict[type, KeyColumnType] = {
    str: KeyColumnType("string"), int: KeyColumnType("bigint"), float: KeyColumnType("double"),
    bool: KeyColumnType("boolean"), bytes: KeyColumnType("binary"), bytearray: KeyColumnType("binary"),
    _dt.date: KeyColumnType("date"), decimal.Decimal: KeyColumnType("decimal", 38, 18),
}
NAIVE_DATETIME_TYPE = KeyColumnType("timestamp_ntz")
AWARE_DATETIME_TYPE = KeyColumnType("timestamp")


def _infer_one(value: Any, where: str) -> KeyColumnType:
    kind = type(value)
    inferred = INFERRED_KEY_COLUMN_TYPES.get(kind)
    if inferred is not None:
        return inferred
    if value is None:
        return KeyColumnType("void")
    if isinstance(value, _dt.datetime):
        return NAIVE_DATETIME_TYPE if value.utcoffset() is None else AWARE_DATETIME_TYPE
    if isinstance(value, tuple):
        children = tuple(_infer_one(v, where) for v in value)
        return KeyColumnType("struct", children=children, field_names=tuple(f"_{i + 1}" for i in range(len(value))))
    if _NUMPY_GENERIC and isinstance(value, _NUMPY_GENERIC):
        numpy_name = _NUMPY_KINDS.get((value.dtype.kind, value.dtype.itemsize))
        if numpy_name is not None:
            return KeyColumnType(numpy_name)
        return _infer_one(value.item(), where)
    for base, inferred in INFERRED_KEY_COLUMN_TYPES.items():  # subclasses (IntEnum, str enums) hash as their base
        if isinstance(value, base):
            return inferred
    raise UnsupportedKeyTypeError(
        f"{where} has type {kind.__qualname__}, which has no Spark key column type here; keys are hashed like "
        f"Spark's xxhash64 for str, int, float, bool, bytes, datetime.date, datetime.datetime, decimal.Decimal, "
        f"numpy scalars and tuples of these. Convert the key in your key selector, or declare the key column types"
    )


def infer_key_types(key: Any) -> tuple[KeyColumnType, ...]:
    """The Spark types of a harness key's columns, as ``spark.createDataFrame`` infers them from Python values: a
    tuple is one column per element (a nested tuple is a struct), anything else a single column. ``str`` is string,
    ``int`` bigint, ``float`` double, ``bool`` boolean, ``bytes`` binary, ``date`` date, ``Decimal``
    decimal(38,18), numpy scalars their own width (``int32`` is int); a tz-aware ``datetime`` is timestamp (the
    instant), a naive one timestamp_ntz (the wall-clock time, as if in UTC); ``None`` inside a tuple is a null
    column (Spark skips it). Declare the types instead when the Spark columns differ (an ``int`` column, say)."""
    if key is None:
        raise NullKeyError("a key is None; keyed state needs a real key (Spark rejects null keys the same way)")
    if isinstance(key, tuple):
        if not key:
            raise UnsupportedKeyTypeError("a key is the empty tuple; a key has at least one column")
        return tuple(_infer_one(value, f"key column {i} ({value!r})") for i, value in enumerate(key))
    return (_infer_one(key, f"the key {key!r}"),)
