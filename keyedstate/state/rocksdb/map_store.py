"""The RocksDB store of map state: one RocksDB key per map entry, ``prefix + namespace + encoded map key``."""

from __future__ import annotations

from typing import Any, Iterator

from keyedstate.serialization import decode_key
from keyedstate.state.base.layout import EntryCodec
from keyedstate.state.base.stores import MISSING, MapStore
from keyedstate.state.rocksdb.column_family_store import ColumnFamilyStore

__all__ = ["RocksDBMapStore"]


class RocksDBMapStore(ColumnFamilyStore, MapStore):
    """One RocksDB key per map entry: ``prefix + namespace + encoded map key``; iteration is a prefix scan."""

    __slots__ = ("_encode",)

    def __init__(self, backend: Any, family_name: str, codec: EntryCodec, name: str) -> None:
        self._encode = codec.serialize_map_key
        super().__init__(backend, family_name, codec, name)

    def get(self, namespace: bytes, user_key: Any) -> Any:
        key = self._prefix(namespace) + self._encode(user_key)
        try:
            data = self.entries.get(key)
        except Exception as error:
            raise self._fail(error, "read") from error
        return MISSING if data is None else self._deserialize(data)

    def put(self, namespace: bytes, user_key: Any, entry: Any) -> None:
        key = self._prefix(namespace) + self._encode(user_key)
        data = self._serialize(entry)
        try:
            self.entries.put(key, data)
        except Exception as error:
            raise self._fail(error, "write") from error

    def put_all(self, namespace: bytes, entries: dict[Any, Any]) -> None:
        prefix = self._prefix(namespace)
        encode, serialize, handle = self._encode, self._serialize, self._handle
        pairs = [(prefix + encode(user_key), serialize(entry)) for user_key, entry in entries.items()]
        batch = self._database.new_batch()
        for key, data in pairs:
            batch.put(key, data, handle)
        self._database.write(batch)

    def remove(self, namespace: bytes, user_key: Any) -> None:
        key = self._prefix(namespace) + self._encode(user_key)
        try:
            self.entries.delete(key)
        except Exception as error:
            raise self._fail(error, "write") from error

    def contains(self, namespace: bytes, user_key: Any) -> bool:
        key = self._prefix(namespace) + self._encode(user_key)
        try:
            return self.entries.get(key) is not None
        except Exception as error:
            raise self._fail(error, "read") from error

    def items(self, namespace: bytes) -> Iterator[tuple[Any, Any]]:
        # The prefix is taken now, not at the first next(): the caller may switch keys before iterating.
        return self._iter_items(self._prefix(namespace))

    def _iter_items(self, prefix: bytes) -> Iterator[tuple[Any, Any]]:
        start = len(prefix)
        deserialize = self._deserialize
        # A RocksDB iterator reads a consistent snapshot, so callers may modify the map while iterating.
        for key, data in self.entries.items(from_key=prefix):
            if not key.startswith(prefix):
                return
            yield decode_key(key, start)[0], deserialize(data)

    def is_empty(self, namespace: bytes) -> bool:
        prefix = self._prefix(namespace)
        iterator = self.entries.iter()
        iterator.seek(prefix)
        return not (iterator.valid() and iterator.key().startswith(prefix))

    def delete(self, namespace: bytes) -> None:
        self._delete_prefix(self._prefix(namespace))
