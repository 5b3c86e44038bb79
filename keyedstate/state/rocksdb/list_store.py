"""The RocksDB store of list state: one RocksDB key per element, ``prefix + namespace + 8-byte sequence``."""

from __future__ import annotations

from typing import Any

from keyedstate.state.base.layout import (
    LIST_SEQUENCE_BYTES,
    EntryCodec,
    pack_sequence,
    prefix_successor,
    unpack_sequence,
)
from keyedstate.state.base.stores import ListStore
from keyedstate.state.rocksdb.column_family_store import ColumnFamilyStore

__all__ = ["RocksDBListStore"]

_LAST_SEQUENCE = b"\xff" * LIST_SEQUENCE_BYTES
# Next list sequence per (key, namespace); bounded so huge key spaces do not grow memory (a miss costs one seek).
_SEQUENCE_CACHE_LIMIT = 65_536


class RocksDBListStore(ColumnFamilyStore, ListStore):
    """One RocksDB key per element: ``prefix + namespace + 8-byte sequence``; ``add`` writes only the new element."""

    __slots__ = ("_next_sequences",)

    def __init__(self, backend: Any, family_name: str, codec: EntryCodec, name: str) -> None:
        self._next_sequences: dict[bytes, int] = {}
        super().__init__(backend, family_name, codec, name)

    def bind(self, database: Any) -> None:
        super().bind(database)
        self._next_sequences = {}

    def get(self, namespace: bytes) -> list[Any]:
        prefix = self._prefix(namespace)
        deserialize = self._deserialize
        entries = []
        try:
            for key, data in self.entries.items(from_key=prefix):
                if not key.startswith(prefix):
                    break
                entries.append(deserialize(data))
        except Exception as error:
            raise self._fail(error, "read") from error
        return entries

    def _next_sequence(self, prefix: bytes) -> int:
        cached = self._next_sequences.get(prefix)
        if cached is not None:
            return cached
        iterator = self.entries.iter()
        iterator.seek_for_prev(prefix + _LAST_SEQUENCE)
        if iterator.valid():
            key = iterator.key()
            if key.startswith(prefix) and len(key) == len(prefix) + LIST_SEQUENCE_BYTES:
                return unpack_sequence(key, len(prefix))[0] + 1
        return 0

    def _remember(self, prefix: bytes, next_sequence: int) -> None:
        cache = self._next_sequences
        if len(cache) >= _SEQUENCE_CACHE_LIMIT:
            cache.clear()
        cache[prefix] = next_sequence

    def append(self, namespace: bytes, entries: list[Any]) -> None:
        prefix = self._prefix(namespace)
        serialized = [self._serialize(entry) for entry in entries]
        try:
            sequence = self._next_sequence(prefix)
            if len(serialized) == 1:
                self.entries.put(prefix + pack_sequence(sequence), serialized[0])
            else:
                batch = self._database.new_batch()
                for offset, data in enumerate(serialized):
                    batch.put(prefix + pack_sequence(sequence + offset), data, self._handle)
                self._database.write(batch)
        except Exception as error:
            raise self._fail(error, "append to") from error
        self._remember(prefix, sequence + len(serialized))

    def replace(self, namespace: bytes, entries: list[Any]) -> None:
        prefix = self._prefix(namespace)
        serialized = [self._serialize(entry) for entry in entries]
        batch = self._database.new_batch()
        batch.delete_range(prefix, prefix_successor(prefix), self._handle)
        for sequence, data in enumerate(serialized):
            batch.put(prefix + pack_sequence(sequence), data, self._handle)
        self._database.write(batch)
        self._remember(prefix, len(serialized))

    def delete(self, namespace: bytes) -> None:
        prefix = self._prefix(namespace)
        self._delete_prefix(prefix)
        self._remember(prefix, 0)
