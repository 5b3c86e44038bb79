"""Key groups: Flink's unit of state distribution.

A key belongs to key group ``murmur(xxh64(encoded key)) % max_parallelism``; partition ``i`` of ``p`` owns the
contiguous range Flink computes in ``KeyGroupRangeAssignment``. The hash is taken over the key's deterministic
encoding, never Python's per-process salted ``hash()``, so a key lands in the same key group after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import xxhash

from keyedstate.errors import ConfigurationError
from keyedstate.serialization.keys import encode_key

__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "MAX_MAX_PARALLELISM",
    "KeyGroupRange",
    "key_group_for_key",
    "key_group_for_encoded_key",
    "key_group_range_for_partition",
    "partition_for_key_group",
    "validate_max_parallelism",
]

DEFAULT_MAX_PARALLELISM = 128
MAX_MAX_PARALLELISM = 1 << 15  # key groups are stored as a 2-byte prefix


def validate_max_parallelism(max_parallelism: int) -> int:
    if not isinstance(max_parallelism, int) or isinstance(max_parallelism, bool) or not (
        1 <= max_parallelism <= MAX_MAX_PARALLELISM
    ):
        raise ConfigurationError(
            f"max_parallelism must be an int between 1 and {MAX_MAX_PARALLELISM}, got {max_parallelism!r}"
        )
    return max_parallelism


@dataclass(frozen=True)
class KeyGroupRange:
    """An inclusive range of key groups ``[start, end]``; empty when ``end < start``."""

    start: int
    end: int

    @classmethod
    def of_all(cls, max_parallelism: int) -> "KeyGroupRange":
        return cls(0, validate_max_parallelism(max_parallelism) - 1)

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def intersection(self, other: "KeyGroupRange") -> "KeyGroupRange":
        return KeyGroupRange(max(self.start, other.start), min(self.end, other.end))

    def to_json(self) -> list[int]:
        return [self.start, self.end]

    @classmethod
    def from_json(cls, value: list[int]) -> "KeyGroupRange":
        return cls(int(value[0]), int(value[1]))


def _murmur_finalize(h: int) -> int:
    """MurmurHash3's 32-bit finalizer (Flink's ``MathUtils.murmurHash`` spreads key hashes the same way)."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def key_group_for_encoded_key(encoded_key: bytes, max_parallelism: int) -> int:
    """The key group of a key given its :func:`~keyedstate.serialization.encode_key` bytes."""
    return _murmur_finalize(xxhash.xxh64_intdigest(encoded_key) & 0xFFFFFFFF) % max_parallelism


def key_group_for_key(key: Any, max_parallelism: int) -> int:
    """The key group of ``key``."""
    return key_group_for_encoded_key(encode_key(key), max_parallelism)


def key_group_range_for_partition(partition: int, partitions: int, max_parallelism: int) -> KeyGroupRange:
    """The contiguous key groups partition ``partition`` of ``partitions`` owns (Flink's exact formula)."""
    validate_max_parallelism(max_parallelism)
    if not (1 <= partitions <= max_parallelism):
        raise ConfigurationError(
            f"partitions must be between 1 and max_parallelism ({max_parallelism}), got {partitions}; raise "
            f"max_parallelism (it cannot change once state exists) or lower the parallelism"
        )
    if not (0 <= partition < partitions):
        raise ConfigurationError(f"partition index {partition} is outside 0..{partitions - 1}")
    start = (partition * max_parallelism + partitions - 1) // partitions
    end = ((partition + 1) * max_parallelism - 1) // partitions
    return KeyGroupRange(start, end)


def partition_for_key_group(key_group: int, partitions: int, max_parallelism: int) -> int:
    """The partition that owns ``key_group`` (inverse of :func:`key_group_range_for_partition`)."""
    return key_group * partitions // max_parallelism
