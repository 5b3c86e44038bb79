"""The RocksDB store of value, reducing and aggregating state: one RocksDB key per (key, namespace), with the
one-entry memo :class:`~keyedstate.state.primitives.value_state.MemoValueState` reads and writes directly."""

from __future__ import annotations

from typing import Any

from keyedstate.state.base.layout import EntryCodec
from keyedstate.state.base.stores import NOT_KEPT, ValueStore
from keyedstate.state.rocksdb.column_family_store import ColumnFamilyStore

__all__ = ["RocksDBValueStore"]


class RocksDBValueStore(ColumnFamilyStore, ValueStore):
    """One RocksDB key per (key, namespace), the hottest path of the backend: a ``MemoValueAccess`` (see there) for
    :class:`~keyedstate.state.primitives.value_state.MemoValueState`; its own methods, and the backend before
    iterating, snapshots and changelogs and before the database is closed or handed on, call :meth:`write_pending`.

    Without TTL, reads call the descriptor's serializer and type check directly (``decode``, ``accepts``) and fall
    back to the codec (which builds the error messages) only when either fails, saving three Python calls per read
    and one per write.
    """

    __slots__ = ("decode", "encode", "accepts", "exact_types", "memo_key", "memo_value", "memo_data")

    def __init__(self, backend: Any, family_name: str, codec: EntryCodec, name: str) -> None:
        super().__init__(backend, family_name, codec, name)
        type_info = codec.descriptor.type_info
        self.decode = self._deserialize if codec.has_ttl else type_info.serializer.deserialize
        self.encode = self._serialize if codec.has_ttl else type_info.serializer.serialize
        self.accepts = None if codec.has_ttl or type_info.accepts_any else type_info.accepts
        self.exact_types = type_info.exact_types

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
                self.entries.put(self.memo_key, data)
            except Exception as error:
                self.forget_memo()
                raise self._fail(error, "write") from error

    def get(self, namespace: bytes) -> Any:
        if self.memo_key is not None:
            self.write_pending()
            self.forget_memo()
        try:
            data = self.entries.get(self._backend.key_prefix + namespace)
        except TypeError:
            self._backend.get_current_key()
            raise
        except Exception as error:
            raise self._fail(error, "read") from error
        if data is None:
            return None
        try:
            value = self.decode(data)
        except Exception:
            return self._deserialize(data)  # raises the codec's error naming the state
        accepts = self.accepts
        if accepts is None or type(value) in self.exact_types or value is None or accepts(value):
            return value
        return self._deserialize(data)  # raises StateTypeMismatchError naming the state and both types

    def put(self, namespace: bytes, entry: Any) -> None:
        if self.memo_key is not None:
            self.write_pending()
            self.forget_memo()
        # Serialized before the write: a value that cannot be serialized writes nothing.
        try:
            data = self.encode(entry)
        except Exception:
            data = self._serialize(entry)  # raises the codec's error naming the state
        try:
            self.entries.put(self._backend.key_prefix + namespace, data)
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
            self.entries.delete(key)
        except Exception as error:
            raise self._fail(error, "clear") from error
