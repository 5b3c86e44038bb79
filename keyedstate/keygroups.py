"""Key groups: where a key's state lives, the same in the harness and on Spark.

A key belongs to key group ``pmod(xxhash64(key columns), num_key_groups)``: Spark's ``xxhash64`` of the key's
columns, which keyed_process computes in the JVM and this module computes in Python from the key's values and its
columns' Spark types (:mod:`keyedstate.key_types`), so a harness snapshot and a Spark checkpoint put every key in the
same key group. This module owns everything about key groups: that assignment, the 2-byte prefix every stored key
starts with, and the ranges of key groups a harness partition owns.

Spark's rules (``XxHash64Function``, the interpreted twin of ``HashExpression``'s generated code):

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
little-endian), which the ``xxhash`` package computes in C; :mod:`keyedstate.key_column_bytes` gives the bytes.
"""

from __future__ import annotations

import datetime as _dt
import struct
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator, Optional, Sequence

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

__all__ = [
    "DEFAULT_NUM_KEY_GROUPS",
    "MAX_NUM_KEY_GROUPS",
    "KEY_GROUP_PREFIX_BYTES",
    "SPARK_HASH_SEED",
    "KeyGroupRange",
    "validate_num_key_groups",
    "num_key_groups_or_alias",
    "spark_xxhash64",
    "key_group_of_columns",
    "key_group_of_key",
    "key_group_assigner",
    "key_group_prefix",
    "key_group_of_stored_key",
    "key_group_range_for_partition",
    "partition_for_key_group",
]

DEFAULT_NUM_KEY_GROUPS = 128
MAX_NUM_KEY_GROUPS = 1 << 15  # key groups are stored as a 2-byte prefix
KEY_GROUP_PREFIX_BYTES = 2


def validate_num_key_groups(num_key_groups: int) -> int:
    if type(num_key_groups) is not int or not (1 <= num_key_groups <= MAX_NUM_KEY_GROUPS):
        raise ConfigurationError(
            f"num_key_groups must be an int between 1 and {MAX_NUM_KEY_GROUPS}, got {num_key_groups!r}"
        )
    return num_key_groups


def num_key_groups_or_alias(num_key_groups: Optional[int], max_parallelism: Optional[int], where: str,
                            stacklevel: int = 2) -> int:
    """``num_key_groups``, or else the deprecated ``max_parallelism`` (PyFlink's name for the same number) with a
    DeprecationWarning (``stacklevel`` frames above the caller); the default when neither is given."""
    if max_parallelism is None:
        return validate_num_key_groups(DEFAULT_NUM_KEY_GROUPS if num_key_groups is None else num_key_groups)
    if num_key_groups is not None:
        raise ConfigurationError(
            f"{where} got both num_key_groups={num_key_groups!r} and max_parallelism={max_parallelism!r}, which are "
            f"one setting; pass num_key_groups only"
        )
    warnings.warn(
        f"{where}: max_parallelism is a deprecated alias of num_key_groups (the number of key groups, keyed_process's "
        f"name for it); pass num_key_groups={max_parallelism!r}", DeprecationWarning, stacklevel=stacklevel + 1,
    )
    return validate_num_key_groups(max_parallelism)


@dataclass(frozen=True)
class KeyGroupRange:
    """An inclusive range of key groups ``[start, end]``; empty when ``end < start``."""

    start: int
    end: int

    @classmethod
    def of_all(cls, num_key_groups: int) -> "KeyGroupRange":
        return cls(0, validate_num_key_groups(num_key_groups) - 1)

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def to_json(self) -> list[int]:
        return [self.start, self.end]

    @classmethod
    def from_json(cls, value: list[int]) -> "KeyGroupRange":
        return cls(int(value[0]), int(value[1]))



_key_group_struct = struct.Struct(">H")
key_group_prefix: Callable[[int], bytes] = _key_group_struct.pack
"""``key_group`` as the 2-byte big-endian prefix every stored key starts with (:mod:`keyedstate.state.base.layout`),
so one key group's entries are one contiguous, sorted range."""


def key_group_of_stored_key(stored_key: bytes) -> int:
    """The key group a stored key (or a ``key group + encoded key`` prefix) starts with."""
    return _key_group_struct.unpack_from(stored_key)[0]




def key_group_range_for_partition(partition: int, partitions: int, num_key_groups: int) -> KeyGroupRange:
    """The contiguous key groups harness partition ``partition`` of ``partitions`` owns (Flink's
    ``KeyGroupRangeAssignment`` formula, so restoring several partitions' snapshots into fewer or more rescales)."""
    validate_num_key_groups(num_key_groups)
    if not (1 <= partitions <= num_key_groups):
        raise ConfigurationError(
            f"partitions must be between 1 and num_key_groups ({num_key_groups}), got {partitions}; raise "
            f"num_key_groups (it cannot change once state exists) or use fewer partitions"
        )
    if not (0 <= partition < partitions):
        raise ConfigurationError(f"partition index {partition} is outside 0..{partitions - 1}")
    start = (partition * num_key_groups + partitions - 1) // partitions
    end = ((partition + 1) * num_key_groups - 1) // partitions
    return KeyGroupRange(start, end)


def partition_for_key_group(key_group: int, partitions: int, num_key_groups: int) -> int:
    """The harness partition that owns ``key_group`` (inverse of :func:`key_group_range_for_partition`)."""
    return key_group * partitions // num_key_groups



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


def key_group_of_columns(values: Sequence[Any], types: Sequence[KeyTypeSpec], num_key_groups: int) -> int:
    """The key group Spark's keyed_process gives these key column values: ``pmod(xxhash64(...), num_key_groups)``,
    always in ``0..num_key_groups - 1``."""
    validate_num_key_groups(num_key_groups)
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
    return _inferred_key_group(key, validate_num_key_groups(num_key_groups))


def _inferred_key_group(key: Any, num_key_groups: int) -> int:
    kind = type(key)
    try:  # the common key types hash straight from their Python type; the rest take the general path below
        if kind is str:
            hashed = _xxh64(key.encode("utf-8"), SPARK_HASH_SEED)
            return (hashed - _TWO_64 if hashed > _LONG_MAX else hashed) % num_key_groups
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
    validate_num_key_groups(num_key_groups)
    if types is None:
        return partial(_inferred_key_group, num_key_groups=num_key_groups)
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
    is_struct = column_type.name == "struct"

    def assign_one(key: Any) -> int:
        try:
            return _signed(hash_column(key, SPARK_HASH_SEED)) % num_key_groups
        except ConfigurationError:
            if key is None:
                raise NullKeyError("a key is None; keyed state needs a real key (Spark rejects null keys the same "
                                   "way)") from None
            if type(key) is tuple and len(key) == 1 and not is_struct:  # a key selector's one-element tuple
                return assign_one(key[0])
            raise

    return assign_one
