"""Heap-specific state primitives (Flink has ``HeapValueState`` beside ``RocksDBValueState`` for the same reason).

``ValueState.value()`` and ``update()`` run once or twice per element; over a heap store each went through two
Python calls (the primitive, then the store). :class:`HeapValueState` reads and writes the store's dict itself and
falls back to the store's methods for everything unusual (no current key, write validation, clearing).
"""

from __future__ import annotations

from typing import Any

from keyedstate.state.heap.stores import HeapValueStore
from keyedstate.state.primitives import ValueState

__all__ = ["HeapValueState"]


class HeapValueState(ValueState):
    """A ``ValueState`` without TTL over a :class:`HeapValueStore`; behaves exactly like ``ValueState``."""

    __slots__ = ("_data",)

    def __init__(self, descriptor: Any, codec: Any, store: HeapValueStore, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._data = store.data  # the store clears its dict but never replaces it

    def value(self) -> Any:
        try:
            return self._data.get(self._backend._current_prefix + self._namespace)
        except TypeError:  # no current key (prefix None): the store raises the right error
            return self._store.get(self._namespace)

    def update(self, value: Any) -> None:
        store = self._store
        if value is None or store._validate is not None:
            ValueState.update(self, value)
            return
        accepts = self._accepts
        if accepts is not None and type(value) not in self._exact_types and not accepts(value):
            self._codec.check_write(value)
        try:
            self._data[self._backend._current_prefix + self._namespace] = value
        except TypeError:  # no current key
            store.put(self._namespace, value)
