"""Which Spark partition runs each key group: the grouping value keyed_process gives a key group.

Spark sends a stateful operator's input to partition ``pmod(murmur3(grouping value, seed 42), shuffle partitions)``.
Grouping by the key-group number itself (the ``"identity"`` layout) leaves the spread to that hash: 128 key groups
over 4 partitions split 25/41/29/33, and the partition with the most key groups sets the pace of every micro-batch.

The ``"balanced"`` layout (the default) groups by a bigint whose Spark hash IS the key-group number. Murmur3 on a
64-bit value with a fixed high word is a bijection of the low word, so that bigint exists and is found by inverting
the hash. Key group ``g`` then runs in partition ``g mod shuffle_partitions`` for every partition count, so each
partition gets the same number of key groups (within one), as Flink gives each subtask an equal share.

The layout is part of the checkpoint: the grouping value keys Spark's state rows. The two layouts use different
column types (int and bigint), so Spark's state schema check refuses to restart a checkpoint with the other layout
instead of silently starting from empty state.
"""

from __future__ import annotations

from typing import Optional

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType

from keyedstate.errors import ConfigurationError

__all__ = [
    "BALANCED",
    "IDENTITY",
    "KEY_GROUP_LAYOUTS",
    "spark_hash_long",
    "balanced_grouping_value",
    "check_key_group_layout",
    "grouping_value_column",
    "key_group_of_grouping_value",
]

BALANCED = "balanced"
IDENTITY = "identity"
KEY_GROUP_LAYOUTS = (BALANCED, IDENTITY)

_MASK = 0xFFFFFFFF
_SPARK_HASH_SEED = 42  # HashPartitioning's Murmur3Hash seed
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_H1_ADD = 0xE6546B64
_FMIX1 = 0x85EBCA6B
_FMIX2 = 0xC2B2AE35
# Multiplying by an odd constant modulo 2**32 is undone by multiplying by its inverse.
_C1_INVERSE = pow(_C1, -1, 1 << 32)
_C2_INVERSE = pow(_C2, -1, 1 << 32)
_FIVE_INVERSE = pow(5, -1, 1 << 32)
_FMIX1_INVERSE = pow(_FMIX1, -1, 1 << 32)
_FMIX2_INVERSE = pow(_FMIX2, -1, 1 << 32)


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _rotate_right(value: int, bits: int) -> int:
    return _rotate_left(value, 32 - bits)


def _mix_k1(k1: int) -> int:
    return (_rotate_left((k1 * _C1) & _MASK, 15) * _C2) & _MASK


def _unmix_k1(k1: int) -> int:
    return (_rotate_right((k1 * _C2_INVERSE) & _MASK, 15) * _C1_INVERSE) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotate_left(h1 ^ k1, 13) * 5 + _H1_ADD) & _MASK


def _unmix_h1(mixed: int, k1: int) -> int:
    return _rotate_right(((mixed - _H1_ADD) * _FIVE_INVERSE) & _MASK, 13) ^ k1


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * _FMIX1) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * _FMIX2) & _MASK
    return h1 ^ (h1 >> 16)


def _undo_xor_shift(value: int, shift: int) -> int:
    result = value
    for _ in range(32 // shift + 1):
        result = value ^ (result >> shift)
    return result & _MASK


def _unfmix(h1: int, length: int) -> int:
    h1 = _undo_xor_shift(h1, 16)
    h1 = (h1 * _FMIX2_INVERSE) & _MASK
    h1 = _undo_xor_shift(h1, 13)
    h1 = (h1 * _FMIX1_INVERSE) & _MASK
    h1 = _undo_xor_shift(h1, 16)
    return h1 ^ length


def _signed32(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


def spark_hash_long(value: int, seed: int = _SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashLong`` (what ``hash(bigint)`` returns and hash partitioning uses)."""
    unsigned = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK, _mix_k1(unsigned & _MASK))
    h1 = _mix_h1(h1, _mix_k1(unsigned >> 32))
    return _signed32(_fmix(h1, 8))


def balanced_grouping_value(key_group: int) -> int:
    """The non-negative bigint (high word 0) whose Spark hash is ``key_group``."""
    h1 = _unfmix(key_group & _MASK, 8)
    h1 = _unmix_h1(h1, _mix_k1(0))
    return _unmix_k1(_unmix_h1(h1, _SPARK_HASH_SEED))


def check_key_group_layout(layout: str) -> None:
    """Raise :class:`~keyedstate.errors.ConfigurationError` unless ``layout`` is one of :data:`KEY_GROUP_LAYOUTS`."""
    if layout not in KEY_GROUP_LAYOUTS:
        raise ConfigurationError(
            f"key_group_layout must be one of {', '.join(map(repr, KEY_GROUP_LAYOUTS))}, got {layout!r}"
        )


def grouping_value_column(key_group: Column, num_key_groups: int, layout: str) -> Column:
    """The grouping column for an int column of key-group numbers in ``[0, num_key_groups)``."""
    check_key_group_layout(layout)
    if layout == IDENTITY:
        return key_group.cast(IntegerType())
    # One constant array, folded by Spark's optimizer. An SQL literal keeps it to one JVM call: a Column per value
    # would be one py4j call each (the literal for the largest count, 32768 key groups, is about 400 KB).
    values = ", ".join(f"{balanced_grouping_value(g)}L" for g in range(num_key_groups))
    return F.element_at(F.expr(f"array({values})"), key_group.cast(IntegerType()) + F.lit(1))


def key_group_of_grouping_value(grouping_value: int, num_key_groups: int, layout: str) -> Optional[int]:
    """The key group a grouping value stands for, or None when the layout never produces that value."""
    key_group = spark_hash_long(grouping_value) if layout == BALANCED else grouping_value
    if not 0 <= key_group < num_key_groups:
        return None
    if layout == BALANCED and grouping_value != balanced_grouping_value(key_group):
        return None
    return key_group
