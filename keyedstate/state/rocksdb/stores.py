"""RocksDB stores: one column family per state, keys in the shared layout (:mod:`keyedstate.state.base.layout`).

Hot-path methods (value get/put) do the least possible work: concatenate the backend's current prefix with the
namespace, one rocksdict call, one codec call. ``try`` blocks are free in CPython 3.11 unless they catch.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from keyedstate.errors import StateBackendError
from keyedstate.serialization import decode_key
from keyedstate.state.base.layout import LIST_SEQUENCE_BYTES, EntryCodec, pack_sequence, prefix_successor, unpack_sequence
from keyedstate.state.base.stores import MISSING, ListStore, MapStore, RawColumn, ValueStore
from keyedstate.state.rocksdb.errors import translate

__all__ = ["NOT_KEPT", "RocksDBValueStore", "RocksDBListStore", "RocksDBMapStore", "RocksDBRawColumn", "ClosedColumnFamily"]

_LAST_SEQUENCE = b"\xff" * LIST_SEQUENCE_BYTES
NOT_KEPT = object()
"""``RocksDBValueStore.memo_value`` when the memo holds only the serialized entry (a mutable value is never handed
out twice: RocksDB state returns a fresh copy from every ``value()``, as Flink's does)."""
# Next list sequence per (key, namespace); bounded so huge key spaces do not grow memory (a miss costs one seek).
_SEQUENCE_CACHE_LIMIT = 65_536


class ClosedColumnFamily:
    """Stands in for a column family after ``close()`` so late access fails with a clear error."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __getattr__(self, name: str) -> Any:
        raise StateBackendError(f"the RocksDB keyed state backend at {self._path} is closed; state cannot be used "
                                f"after close()")


class _RocksStore:
    __slots__ = ("_backend", "_database", "_cf", "_handle", "_family_name", "_serialize", "_deserialize", "_name")

    def __init__(self, backend: Any, family_name: str, codec: EntryCodec | None, name: str) -> None:
        self._backend = backend
        self._family_name = family_name
        self._name = name
        if codec is not None:
            # Without TTL an entry is the bare value: bind the value codec directly (one call less per access).
            self._serialize = codec.serialize_entry if codec.has_ttl else codec.serialize_value
            self._deserialize = codec.deserialize_entry if codec.has_ttl else codec.deserialize_value
        self.bind(backend._database)

    def bind(self, database: Any) -> None:
        """(Re)attach to the open database (after open or restore)."""
        self._database = database
        self._cf = database.column_family(self._family_name)
        self._handle = database.handles[self._family_name]

    def unbind(self, path: str) -> None:
        self._database = None
        self._cf = ClosedColumnFamily(path)
        self._handle = None

    def _prefix(self, namespace: bytes) -> bytes:
        try:
            return self._backend.key_prefix + namespace
        except TypeError:
            self._backend.get_current_key()  # raises NoKeyContextError
            raise

    def _fail(self, error: Exception, action: str) -> Exception:
        return translate(error, f"{action} state {self._name!r}", self._backend.path)

    def _delete_prefix(self, prefix: bytes) -> None:
        try:
            self._cf.delete_range(prefix, prefix_successor(prefix))
        except Exception as error:
            raise self._fail(error, "clear") from error


class RocksDBValueStore(_RocksStore, ValueStore):
    """One RocksDB key per (key, namespace): the hottest path of the backend.

    Without TTL, reads call the descriptor's serializer and type check directly and fall back to the codec (which
    builds the error messages) only when either fails, saving three Python calls per read and one per write.

    The last entry :class:`~keyedstate.state.rocksdb.primitives.RocksDBValueState` wrote is kept here and written
    to RocksDB only when that state writes another key, or before anything else reads or writes the column family
    (this store's own methods, :meth:`write_pending`, which the backend calls before iterating, snapshots and
    changelogs, and before the database is closed or handed on). Elements arrive in runs of one key, so a key
    updated for every element is written once per run, and read back from here instead of RocksDB.
    """

    __slots__ = ("_fast_deserialize", "_fast_serialize", "_accepts", "_exact_types", "memo_key", "memo_value",
                 "memo_data")

    def __init__(self, backend: Any, family_name: str, codec: EntryCodec, name: str) -> None:
        super().__init__(backend, family_name, codec, name)
        type_info = codec.descriptor.type_info
        self._fast_deserialize = self._deserialize if codec.has_ttl else type_info.serializer.deserialize
        self._fast_serialize = self._serialize if codec.has_ttl else type_info.serializer.serialize
        self._accepts = None if codec.has_ttl or type_info.accepts_any else type_info.accepts
        self._exact_types = type_info.exact_types

    def bind(self, database: Any) -> None:
        self.forget_memo()  # a (re)bound store may face other data (a reset, another database)
        super().bind(database)

    def unbind(self, path: str) -> None:
        self.forget_memo()  # the backend wrote it already (write_pending) or is discarding the database
        super().unbind(path)

    def forget_memo(self) -> None:
        self.memo_key = None
        self.memo_value = NOT_KEPT
        self.memo_data = None

    def write_pending(self) -> None:
        """Write the entry the fast path kept back, if any (the memo stays, now clean)."""
        data = self.memo_data
        if data is not None:
            self.memo_data = None
            try:
                self._cf.put(self.memo_key, data)
            except Exception as error:
                self.forget_memo()
                raise self._fail(error, "write") from error

    def get(self, namespace: bytes) -> Any:
        if self.memo_key is not None:
            self.write_pending()
            self.forget_memo()
        try:
            data = self._cf.get(self._backend.key_prefix + namespace)
        except TypeError:
            self._backend.get_current_key()
            raise
        except Exception as error:
            raise self._fail(error, "read") from error
        if data is None:
            return None
        try:
            value = self._fast_deserialize(data)
        except Exception:
            return self._deserialize(data)  # raises the codec's error naming the state
        accepts = self._accepts
        if accepts is None or type(value) in self._exact_types or value is None or accepts(value):
            return value
        return self._deserialize(data)  # raises StateTypeMismatchError naming the state and both types

    def put(self, namespace: bytes, entry: Any) -> None:
        if self.memo_key is not None:
            self.write_pending()
            self.forget_memo()
        # Serialized before the write: a value that cannot be serialized writes nothing.
        try:
            data = self._fast_serialize(entry)
        except Exception:
            data = self._serialize(entry)  # raises the codec's error naming the state
        try:
            self._cf.put(self._backend.key_prefix + namespace, data)
        except TypeError:
            self._backend.get_current_key()
            raise
        except Exception as error:
            raise self._fail(error, "write") from error

    def delete(self, namespace: bytes) -> None:
        if self.memo_key is not None:
            self.write_pending()
            self.forget_memo()
        key = self._prefix(namespace)
        try:
            self._cf.delete(key)
        except Exception as error:
            raise self._fail(error, "clear") from error


class RocksDBListStore(_RocksStore, ListStore):
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
            for key, data in self._cf.items(from_key=prefix):
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
        iterator = self._cf.iter()
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
                self._cf.put(prefix + pack_sequence(sequence), serialized[0])
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


class RocksDBMapStore(_RocksStore, MapStore):
    """One RocksDB key per map entry: ``prefix + namespace + encoded map key``; iteration is a prefix scan."""

    __slots__ = ("_encode",)

    def __init__(self, backend: Any, family_name: str, codec: EntryCodec, name: str) -> None:
        self._encode = codec.serialize_map_key
        super().__init__(backend, family_name, codec, name)

    def get(self, namespace: bytes, user_key: Any) -> Any:
        key = self._prefix(namespace) + self._encode(user_key)
        try:
            data = self._cf.get(key)
        except Exception as error:
            raise self._fail(error, "read") from error
        return MISSING if data is None else self._deserialize(data)

    def put(self, namespace: bytes, user_key: Any, entry: Any) -> None:
        key = self._prefix(namespace) + self._encode(user_key)
        data = self._serialize(entry)
        try:
            self._cf.put(key, data)
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
            self._cf.delete(key)
        except Exception as error:
            raise self._fail(error, "write") from error

    def contains(self, namespace: bytes, user_key: Any) -> bool:
        key = self._prefix(namespace) + self._encode(user_key)
        try:
            return self._cf.get(key) is not None
        except Exception as error:
            raise self._fail(error, "read") from error

    def items(self, namespace: bytes) -> Iterator[tuple[Any, Any]]:
        # The prefix is taken now, not at the first next(): the caller may switch keys before iterating.
        return self._iter_items(self._prefix(namespace))

    def _iter_items(self, prefix: bytes) -> Iterator[tuple[Any, Any]]:
        start = len(prefix)
        deserialize = self._deserialize
        # A RocksDB iterator reads a consistent snapshot, so callers may modify the map while iterating.
        for key, data in self._cf.items(from_key=prefix):
            if not key.startswith(prefix):
                return
            yield decode_key(key, start)[0], deserialize(data)

    def is_empty(self, namespace: bytes) -> bool:
        prefix = self._prefix(namespace)
        iterator = self._cf.iter()
        iterator.seek(prefix)
        return not (iterator.valid() and iterator.key().startswith(prefix))

    def delete(self, namespace: bytes) -> None:
        self._delete_prefix(self._prefix(namespace))


class RocksDBRawColumn(_RocksStore, RawColumn):
    """An ordered bytes map in its own column family (the timer service keeps its queues here).

    The family is created by the first write: most functions use timers of one time domain only, and every column
    family costs time at each open and flush of a key group's database. Until then reads find nothing."""

    __slots__ = ("name",)

    def __init__(self, backend: Any, family_name: str, name: str) -> None:
        self.name = name
        super().__init__(backend, family_name, None, name)

    def bind(self, database: Any) -> None:
        self._database = database
        self._cf = self._handle = None
        self._existing()

    def _existing(self) -> Any:
        """The column family if the database has it (a replayed changelog may have created it), else None."""
        family = self._database.column_families.get(self._family_name)
        if family is not None:
            self._cf = family
            self._handle = self._database.handles[self._family_name]
        return family

    def _for_write(self) -> Any:
        family = self._cf
        if family is None and self._existing() is None:
            super().bind(self._database)  # creates the column family
            family = self._cf
        return family

    def get(self, key: bytes) -> bytes | None:
        family = self._cf
        if family is None and self._existing() is None:
            return None
        try:
            return self._cf.get(key)
        except Exception as error:
            raise self._fail(error, "read") from error

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        family = self._cf
        if family is None and self._existing() is None:
            return [None] * len(keys)
        try:
            return self._cf.get(keys)  # one multi-get
        except Exception as error:
            raise self._fail(error, "read") from error

    def put(self, key: bytes, value: bytes) -> None:
        family = self._for_write()
        try:
            family.put(key, value)
        except Exception as error:
            raise self._fail(error, "write") from error

    def delete(self, key: bytes) -> None:
        family = self._cf
        if family is None and self._existing() is None:
            return
        try:
            self._cf.delete(key)
        except Exception as error:
            raise self._fail(error, "write") from error

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        family = self._cf
        if family is None and self._existing() is None:
            return iter(())
        family = self._cf
        iterator = family.items(from_key=start) if start is not None else family.items()
        return _until(iterator, end)

    def delete_range(self, start: bytes, end: bytes) -> None:
        family = self._cf
        if family is None and self._existing() is None:
            return
        try:
            self._cf.delete_range(start, end)
        except Exception as error:
            raise self._fail(error, "write") from error

    def put_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        pairs = list(pairs)
        if not pairs:
            return
        self._for_write()
        batch = self._database.new_batch()
        for key, value in pairs:
            batch.put(key, value, self._handle)
        self._database.write(batch)

    def _fail(self, error: Exception, action: str) -> Exception:
        return translate(error, f"{action} raw column {self.name!r} of", self._backend.path)


def _until(iterator: Iterator[tuple[bytes, bytes]], end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    for key, value in iterator:
        if end is not None and key >= end:
            return
        yield key, value
