"""Heap-specific state primitives (Flink has ``HeapValueState`` beside ``RocksDBValueState`` for the same reason).

``ValueState.value()`` and ``update()`` run once or twice per element; over a heap store each went through two
Python calls (the primitive, then the store). :class:`HeapValueState` reads and writes the store's dict itself and
falls back to the store's methods for everything unusual (no current key, write validation, clearing).
:class:`CompiledHeapValueState` runs the same two calls in C when the fast path is built (:mod:`keyedstate.fastpath`).
"""

from __future__ import annotations

from types import MethodType
from typing import Any

from keyedstate.fastpath import fastpath
from keyedstate.state.base.key_context import KEY_PREFIX_FIELD
from keyedstate.state.heap.stores import HeapValueStore
from keyedstate.state.primitives import ValueState

__all__ = ["HeapValueState", "CompiledHeapValueState", "heap_value_state_class"]

_NOTHING_STORED = object()  # never a prefix, not even None (no current key)


class HeapValueState(ValueState):
    """A ``ValueState`` without TTL over a :class:`HeapValueStore`; behaves exactly like ``ValueState``."""

    # The stored key (current key's prefix + namespace) is remembered for the prefix object it was built from: a
    # key's elements call value() and update() again and again with the same prefix, and concatenating and hashing
    # a fresh bytes object per call costs more than the identity test. Holding the prefix keeps its identity unique.
    __slots__ = ("_data", "_key_prefix", "_stored_key")

    def __init__(self, descriptor: Any, codec: Any, store: HeapValueStore, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._data = store.data  # the store clears its dict but never replaces it
        self._key_prefix: Any = _NOTHING_STORED
        self._stored_key = b""

    def set_current_namespace(self, namespace: Any) -> None:
        ValueState.set_current_namespace(self, namespace)
        self._key_prefix = _NOTHING_STORED

    def value(self) -> Any:
        prefix = self._backend.key_prefix
        if prefix is not self._key_prefix:
            if prefix is None:  # no current key: the store raises the right error
                return self._store.get(self._namespace)
            self._stored_key = prefix + self._namespace
            self._key_prefix = prefix
        return self._data.get(self._stored_key)

    def update(self, value: Any) -> None:
        store = self._store
        if value is None or store._validate is not None:
            ValueState.update(self, value)
            return
        accepts = self._accepts
        if accepts is not None and type(value) not in self._exact_types and not accepts(value):
            self._codec.check_write(value)
        prefix = self._backend.key_prefix
        if prefix is not self._key_prefix:
            if prefix is None:  # no current key
                store.put(self._namespace, value)
                return
            self._stored_key = prefix + self._namespace
            self._key_prefix = prefix
        self._data[self._stored_key] = value


class CompiledHeapValueState(HeapValueState):
    """:class:`HeapValueState` with ``value()`` and ``update()`` in C (``keyedstate._fastpath.HeapValueAccess``).

    The C calls do the common case (a current key; a value of one of the type's exact types, or any value when the
    type accepts anything) and call :class:`HeapValueState`'s methods for everything else. Only for stores without
    write validation (the Spark group function's backend); see :func:`heap_value_state_class`.
    """

    __slots__ = ("_access", "value", "update")  # instance attributes holding the C calls shadow the methods

    def __init__(self, descriptor: Any, codec: Any, store: HeapValueStore, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._access = fastpath.HeapValueAccess(  # type: ignore[union-attr]
            data=store.data,
            backend=backend,
            prefix_field=KEY_PREFIX_FIELD,
            namespace=self._namespace,
            exact_types=None if self._accepts is None else self._exact_types,
            slow_value=MethodType(HeapValueState.value, self),
            slow_update=MethodType(HeapValueState.update, self),
        )
        self.value = self._access.value  # type: ignore[method-assign]  # shadows the method: see __slots__
        self.update = self._access.update  # type: ignore[method-assign]

    def set_current_namespace(self, namespace: Any) -> None:
        HeapValueState.set_current_namespace(self, namespace)
        self._access.set_namespace(self._namespace)


def heap_value_state_class(store: HeapValueStore) -> type[HeapValueState]:
    """The ValueState class for ``store``: compiled when the fast path is built and the store does not validate
    writes (validation is the Python path's job)."""
    if fastpath is not None and store._validate is None:
        return CompiledHeapValueState
    return HeapValueState
