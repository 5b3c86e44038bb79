"""RocksDB-specific state primitives (Flink has ``RocksDBValueState`` for the same reason).

``ValueState.value()`` and ``update()`` run once or twice per element; over a RocksDB store each went through two
Python calls (the primitive, then the store). :class:`RocksDBValueState` does the store's work in its own frame and
falls back to the store's methods, which name the state in their errors, for everything unusual (no current key,
a serializer or type failure, a RocksDB error). It also keeps the entry it last wrote or read in the store's memo
(see :class:`RocksDBValueStore`): a run of one key's elements reads RocksDB at most once and writes it once.
"""

from __future__ import annotations

from typing import Any

from keyedstate.state.primitives import ValueState
from keyedstate.state.rocksdb.value_store import NOT_KEPT, RocksDBValueStore

__all__ = ["RocksDBValueState"]

_NOTHING_STORED = object()  # never a prefix, not even None (no current key)


class RocksDBValueState(ValueState):
    """A ``ValueState`` without TTL over a :class:`RocksDBValueStore`; behaves exactly like ``ValueState``."""

    # The stored key is remembered for the prefix object it was built from (a key's elements reuse one prefix).
    __slots__ = ("_key_prefix", "_stored_key")

    def __init__(self, descriptor: Any, codec: Any, store: RocksDBValueStore, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._key_prefix: Any = _NOTHING_STORED
        self._stored_key = b""

    def set_current_namespace(self, namespace: Any) -> None:
        ValueState.set_current_namespace(self, namespace)
        self._key_prefix = _NOTHING_STORED

    def value(self) -> Any:
        store = self._store
        prefix = self._backend.key_prefix
        if prefix is not self._key_prefix:
            if prefix is None:
                return store.get(self._namespace)  # raises NoKeyContextError
            self._stored_key = prefix + self._namespace
            self._key_prefix = prefix
        stored_key = self._stored_key
        if store.memo_key is stored_key:  # the entry this state last wrote or read, for this very key
            value = store.memo_value
            if value is not NOT_KEPT:
                return value
            data = store.memo_data
        else:
            data = None
        if data is None:
            family = store._cf
            pending = store.memo_data
            try:
                if pending is not None:  # write_pending() inline: the previous key's entry, written back
                    store.memo_data = None
                    family.put(store.memo_key, pending)
                data = family.get(stored_key)
            except Exception:
                if pending is not None and store.memo_data is None:
                    store.memo_data = pending  # not written: the store's write_pending() retries and names it
                    store.write_pending()
                return store.get(self._namespace)  # raises the store's error naming the state and the database
            if data is None:
                store.memo_key, store.memo_value = stored_key, None
                return None
        try:
            value = store.fast_deserialize(data)
        except Exception:
            return store.get(self._namespace)
        accepts = store._accepts
        kind = type(value)
        if accepts is None or kind in store._exact_types or value is None or accepts(value):
            if store.memo_key is not stored_key:
                store.memo_key = stored_key
                store.memo_value = value if kind in _IMMUTABLE_SCALARS or (
                    kind is tuple and _IMMUTABLE_SCALARS.issuperset(map(type, value))) else NOT_KEPT
            return value
        return store.get(self._namespace)  # raises StateTypeMismatchError

    def update(self, value: Any) -> None:
        if value is None:
            ValueState.update(self, value)
            return
        accepts = self._accepts
        if accepts is not None and type(value) not in self._exact_types and not accepts(value):
            self._codec.check_write(value)
        store = self._store
        prefix = self._backend.key_prefix
        if prefix is not self._key_prefix:
            if prefix is None:
                store.put(self._namespace, value)  # raises NoKeyContextError
                return
            self._stored_key = prefix + self._namespace
            self._key_prefix = prefix
        try:
            data = store.fast_serialize(value)  # now: a value that cannot be stored fails at update()
        except Exception:
            store.put(self._namespace, value)  # redone by the store, which raises its error naming the state
            return
        stored_key = self._stored_key
        if store.memo_data is not None and store.memo_key is not stored_key:
            store.write_pending()
        store.memo_key = stored_key
        kind = type(value)  # the immutability test inline (see _IMMUTABLE_SCALARS): this runs for every element
        store.memo_value = value if kind in _IMMUTABLE_SCALARS or (
            kind is tuple and _IMMUTABLE_SCALARS.issuperset(map(type, value))) else NOT_KEPT
        store.memo_data = data


# A value is handed out again from the memo only if no later mutation can show through: scalars, tuples of scalars.
_IMMUTABLE_SCALARS = frozenset((int, float, str, bytes, bool, type(None)))
