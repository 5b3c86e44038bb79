"""Spark's ``xxhash64`` of a key's columns, computed in Python, and the key group it gives.

On Spark, keyed_process puts a key in key group ``pmod(xxhash64(key columns), num_key_groups)``. The functions here
compute the same numbers from the key's Python values and its columns' Spark types (:mod:`keyedstate.key_types`),
so the harness and Spark agree on where a key lives. Spark's rules (``XxHash64Function``, the interpreted twin of
``HashExpression``'s generated code) are:

* the hash starts at seed 42 and each column's hash is the seed of the next; a null column (``None``) leaves it
  unchanged, at any depth;
* boolean (1 or 0), tinyint, smallint, int and date (days since 1970-01-01) are hashed as a 4-byte int; bigint,
  timestamp and timestamp_ntz (microseconds since 1970-01-01, UTC or wall clock) as an 8-byte long;
* float and double as their IEEE bits, with -0.0 hashed as 0 and every NaN as Java's canonical NaN;
* decimals of precision <= 18 as the long of their unscaled value, wider ones as the unscaled value's minimal
  big-endian two's-complement bytes (``BigInteger.toByteArray``);
* string as its UTF-8 bytes, binary as its bytes;
* array and struct as their elements or fields in order, chained like columns.

Every int, long and byte string is hashed with standard XXH64 (Spark's ``XXH64`` is the reference algorithm,
little-endian), which the ``xxhash`` package computes in C.
"""

from __future__ import annotations

import datetime as _dt
import struct
from typing import Any, Callable, Optional, Sequence

import xxhash

from keyedstate.errors import ConfigurationError, NullKeyError
from keyedstate.key_column_bytes import key_value_mismatch, scalar_encoder
from keyedstate.key_types import (
    AWARE_DATETIME_TYPE,
    INFERRED_KEY_COLUMN_TYPES,
    NAIVE_DATETIME_TYPE,
    KeyColumnType,
    KeyTypeSpec,
    infer_key_types,
    key_column_type,
    key_column_types,
)

__all__ = ["SPARK_HASH_SEED", "spark_xxhash64", "key_group_of_columns", "key_group_of_key", "key_group_assigner"]

SPARK_HASH_SEED = 42

_TWO_64 = 1 << 64
_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1
_xxh64 = xxhash.xxh64_intdigest
_pack_long = struct.Struct("<q").pack
# (value, unsigned 64-bit seed) -> unsigned 64-bit hash
Hasher = Callable[[Any, int], int]


def _array_hasher(column_type: KeyColumnType) -> Hasher:
    hash_element = _hasher(column_type.children[0])

    def hash_array(value: Any, seed: int) -> int:
        if not isinstance(value, (list, tuple)):
            raise key_value_mismatch(column_type, value, "it takes a list")
        for element in value:
            if element is not None:
                seed = hash_element(element, seed)
        return seed

    return hash_array


def _struct_hasher(column_type: KeyColumnType) -> Hasher:
    field_hashers = [_hasher(child) for child in column_type.children]
    names = column_type.field_names

    def hash_struct(value: Any, seed: int) -> int:
        if isinstance(value, dict):
            value = [value.get(name) for name in names]
        elif not isinstance(value, (list, tuple)) or len(value) != len(field_hashers):
            raise key_value_mismatch(column_type, value, f"it takes a tuple of {len(field_hashers)} fields or a dict")
        for field, hash_field in zip(value, field_hashers):
            if field is not None:
                seed = hash_field(field, seed)
        return seed

    return hash_struct


_HASHERS: dict[KeyColumnType, Hasher] = {}


def _hasher(column_type: KeyColumnType) -> Hasher:
    hasher = _HASHERS.get(column_type)
    if hasher is None:
        if column_type.name == "array":
            hasher = _array_hasher(column_type)
        elif column_type.name == "struct":
            hasher = _struct_hasher(column_type)
        else:
            encode = scalar_encoder(column_type)
            hasher = lambda value, seed: _xxh64(encode(value), seed)  # noqa: E731
        _HASHERS[column_type] = hasher
    return hasher


def _signed(unsigned: int) -> int:
    return unsigned - _TWO_64 if unsigned > _LONG_MAX else unsigned


def spark_xxhash64(values: Sequence[Any], types: Sequence[KeyTypeSpec]) -> int:
    """Spark's ``xxhash64(c1, c2, ...)`` of one row's key column values (``None`` for a null), each of the
    matching Spark type (a DDL name such as ``"bigint"``, a pyspark ``DataType`` or a ``KeyColumnType``); a signed
    64-bit int, as Spark returns it. Raises ConfigurationError when a value does not fit its type."""
    if isinstance(values, (str, bytes)) or len(values) != len(types):
        raise ConfigurationError(
            f"spark_xxhash64 takes one value per key column type: got {values!r} for {len(types)} type(s); pass "
            f"the values as a sequence such as (value,)"
        )
    return _signed(_hash_columns(values, [_hasher(key_column_type(spec)) for spec in types]))


def _hash_columns(values: Sequence[Any], hashers: Sequence[Hasher]) -> int:
    hashed = SPARK_HASH_SEED
    for position, (value, hash_column) in enumerate(zip(values, hashers)):
        if value is not None:
            try:
                hashed = hash_column(value, hashed)
            except ConfigurationError as error:
                raise ConfigurationError(f"key column {position}: {error}") from None
    return hashed


def _check_num_key_groups(num_key_groups: int) -> None:
    if type(num_key_groups) is not int or num_key_groups < 1:
        raise ConfigurationError(f"num_key_groups must be a positive int, got {num_key_groups!r}")


def key_group_of_columns(values: Sequence[Any], types: Sequence[KeyTypeSpec], num_key_groups: int) -> int:
    """The key group Spark's keyed_process gives these key column values: ``pmod(xxhash64(...), num_key_groups)``,
    always in ``0..num_key_groups - 1``."""
    _check_num_key_groups(num_key_groups)
    return spark_xxhash64(values, types) % num_key_groups  # Python's % of a negative hash is Spark's pmod


def _hash_inferred_datetime(value: Any, seed: int) -> int:
    return _hasher(NAIVE_DATETIME_TYPE if value.utcoffset() is None else AWARE_DATETIME_TYPE)(value, seed)


# what a harness key's Python value hashes as when its type is inferred (keyedstate.key_types decides the types)
_INFERRED_HASHERS: dict[type, Hasher] = {
    **{kind: _hasher(column_type) for kind, column_type in INFERRED_KEY_COLUMN_TYPES.items()},
    _dt.datetime: _hash_inferred_datetime,
}


def key_group_of_key(key: Any, num_key_groups: int, *, types: Optional[Sequence[KeyTypeSpec]] = None) -> int:
    """The key group of a key as the harness and the user's function see it: the column's value for a one-column
    key, a tuple of column values otherwise. Without ``types`` the column types are inferred from the values
    (:func:`~keyedstate.key_types.infer_key_types`: a Python int is a bigint, a str a string). Raises NullKeyError
    for ``None``. For many keys with declared types, build a :func:`key_group_assigner` once."""
    if types is not None:
        return key_group_assigner(num_key_groups, types)(key)
    _check_num_key_groups(num_key_groups)
    kind = type(key)
    try:  # the common key types hash straight from their Python type; the rest take the general path below
        if kind is str:
            return _signed(_xxh64(key.encode("utf-8"), SPARK_HASH_SEED)) % num_key_groups
        if kind is int and _LONG_MIN <= key <= _LONG_MAX:
            return _signed(_xxh64(_pack_long(key), SPARK_HASH_SEED)) % num_key_groups
        if kind is tuple and key:
            hashed = SPARK_HASH_SEED
            for value in key:
                if value is not None:
                    hashed = _INFERRED_HASHERS[type(value)](value, hashed)
            return _signed(hashed) % num_key_groups
        return _signed(_INFERRED_HASHERS[kind](key, SPARK_HASH_SEED)) % num_key_groups
    except (KeyError, UnicodeEncodeError, ConfigurationError):
        pass  # needs inference (numpy scalars, nested tuples, subclasses), or fails there with the column named
    types = infer_key_types(key)
    return key_group_of_columns(key if isinstance(key, tuple) else (key,), types, num_key_groups)


def key_group_assigner(num_key_groups: int, types: Optional[Sequence[KeyTypeSpec]] = None) -> Callable[[Any], int]:
    """``key -> key group`` for many keys of one shape (the harness's per-element call): with ``types`` (one per key
    column, see :func:`~keyedstate.key_types.key_column_types`) the hashing is prepared once; without, each key's
    types are inferred as :func:`key_group_of_key` does. A one-column key is the column's value, a key of several
    columns the tuple of their values."""
    _check_num_key_groups(num_key_groups)
    if types is None:
        return lambda key: key_group_of_key(key, num_key_groups)
    column_types = key_column_types(types)
    hashers = [_hasher(column_type) for column_type in column_types]
    if len(hashers) == 1:
        return _one_column_assigner(column_types[0], hashers[0], num_key_groups)

    def assign(key: Any) -> int:
        if not isinstance(key, tuple) or len(key) != len(hashers):
            raise ConfigurationError(
                f"the key {key!r} does not have one value per key column type ({', '.join(map(str, column_types))}); "
                f"a key of several columns is a tuple of their values"
            )
        return _signed(_hash_columns(key, hashers)) % num_key_groups

    return assign


def _one_column_assigner(column_type: KeyColumnType, hash_column: Hasher, num_key_groups: int) -> Callable[[Any], int]:
    struct = column_type.name == "struct"

    def assign_one(key: Any) -> int:
        try:
            return _signed(hash_column(key, SPARK_HASH_SEED)) % num_key_groups
        except ConfigurationError:
            if key is None:
                raise NullKeyError("a key is None; keyed state needs a real key (Spark rejects null keys the same "
                                   "way)") from None
            if type(key) is tuple and len(key) == 1 and not struct:  # a key selector's one-element tuple
                return assign_one(key[0])
            raise

    return assign_one
