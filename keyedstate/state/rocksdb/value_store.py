"""The RocksDB store of value, reducing and aggregating state: one RocksDB key per (key, namespace), with the
one-entry memo :class:`~keyedstate.state.primitives.value_state.MemoValueState` reads and writes directly, and on a
database that started empty the dict of values it lends that state instead (bulk mode)."""

from __future__ import annotations

from typing import Any, Optional

from keyedstate.state.base.layout import EntryCodec
from keyedstate.state.base.stores import NOT_KEPT, ValueStore
from keyedstate.state.primitives.value_state import bulk_value_types
from keyedstate.state.rocksdb.column_family_store import ColumnFamilyStore

__all__ = ["RocksDBValueStore"]


class RocksDBValueStore(ColumnFamilyStore, ValueStore):
    """One RocksDB key per (key, namespace), the hottest path of the backend: a ``MemoValueAccess`` (see there) for
    :class:`~keyedstate.state.primitives.value_state.MemoValueState`; its own methods, and the backend before
    iterating, snapshots and changelogs and before the database is closed or handed on, call :meth:`write_pending`.

    Without TTL, reads call the descriptor's serializer and type check directly (``decode``, ``accepts``) and fall
    back to the codec (which builds the error messages) only when either fails, saving three Python calls per read
    and one per write.

    Bulk mode (:meth:`start_bulk` to :meth:`end_bulk`, which :meth:`write_pending` and every method here call first):
    ``bulk`` holds the values written since, as they are, and the attached states read and write it in C.
    """

    __slots__ = ("decode", "encode", "accepts", "exact_types", "memo_key", "memo_value", "memo_data", "bulk",
                 "_bulk_types", "_states")

    def __init__(self, backend: Any, family_name: str, codec: EntryCodec, name: str) -> None:
        self.bulk: Optional[dict[bytes, Any]] = None
        self._states: list[Any] = []
        super().__init__(backend, family_name, codec, name)
        type_info = codec.descriptor.type_info
        self.decode = self._deserialize if codec.has_ttl else type_info.serializer.deserialize
        self.encode = self._serialize if codec.has_ttl else codec.raw_serialize
        self.accepts = None if codec.has_ttl or type_info.accepts_any else type_info.accepts
        self.exact_types = type_info.exact_types
        self._bulk_types = None if codec.has_ttl else bulk_value_types(type_info)

    def attach_state(self, state: Any) -> None:
        """Register a ``MemoValueState`` over this store: :meth:`start_bulk` lends it the bulk values."""
        self._states.append(state)

    def start_bulk(self) -> None:
        """Keep the values written from now on in a dict, as they are, and read them from there (the family must be
        empty: a value not in the dict is absent): see ``MemoValueState``. A store whose values a later mutation
        could change, or whose codec could refuse one at writing, keeps its memo."""
        if self._bulk_types is None or self.bulk is not None or not self._states or not all(
                state.can_bulk() for state in self._states):
            return
        self.write_pending()
        self.forget_memo()
        self.bulk = {}
        for state in self._states:
            state.start_bulk(self.bulk, *self._bulk_types)

    def end_bulk(self) -> None:
        """Encode the bulk values and write them in one batch; the states use their memo path again."""
        values = self.bulk
        if values is None:
            return
        self.bulk = None
        for state in self._states:
            state.end_bulk()
        if not values:
            return
        encode = self.encode
        try:
            self._database.put_entries(self._family_name, list(values), [encode(value) for value in values.values()])
        except Exception as error:
            raise self._fail(error, "write") from error

    def bind(self, database: Any) -> None:
        self.forget_memo()  # a (re)bound store may face other data (a reset, another database)
        self._drop_bulk()
        super().bind(database)

    def unbind(self, path: str) -> None:
        self.forget_memo()  # the backend wrote it already (write_pending) or is discarding the database
        self._drop_bulk()
        super().unbind(path)

    def _drop_bulk(self) -> None:
        if self.bulk is not None:
            self.bulk = None
            for state in self._states:
                state.end_bulk()

    def forget_memo(self) -> None:
        self.memo_key = None
        self.memo_value = NOT_KEPT
        self.memo_data = None

    def write_pending(self) -> None:
        """Write the entries the fast paths kept back, if any (the memo stays, now clean; bulk mode ends)."""
        if self.bulk is not None:
            self.end_bulk()
        data = self.memo_data
        if data is not None:
            self.memo_data = None
            try:
                self.entries.put(self.memo_key, data)
            except Exception as error:
                self.forget_memo()
                raise self._fail(error, "write") from error

    def get(self, namespace: bytes) -> Any:
        if self.bulk is not None:
            self.end_bulk()
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
        if self.bulk is not None:
            self.end_bulk()
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
        if self.bulk is not None:
            self.end_bulk()
        if self.memo_key is not None:
            self.write_pending()
            self.forget_memo()
        key = self._prefix(namespace)
        try:
            self.entries.delete(key)
        except Exception as error:
            raise self._fail(error, "clear") from error
