"""Value state. ``value()``/``update()`` run once or twice per element, more often than a call of the store's method
is worth: without TTL they use the store's :class:`~keyedstate.state.base.stores.ValueAccess` (its entries, in the
entry format it defines) and its methods, which name the state in their errors, only for the unusual. Three forms
(:func:`value_state_class`): :class:`ValueState` writes through (the heap's dict); :class:`CompiledValueState` is its
declared twin in C (``tests/test_fastpath_differential.py`` runs the two side by side); :class:`MemoValueState` keeps
one entry back (RocksDB), apart because the memo made the heap's ``value()``+``update()`` about 15% slower. The TTL
variant stores ``(value, last_access)`` through the store's methods.
"""

from __future__ import annotations

from types import MethodType
from typing import Any, Optional

from keyedstate.fastpath import fastpath
from keyedstate.serialization.values import DefaultValueCodec, PickleValueCodec
from keyedstate.state.base.key_context import KEY_PREFIX_FIELD
from keyedstate.state.base.layout import EntryCodec
from keyedstate.state.base.stores import NOT_KEPT, MemoValueAccess
from keyedstate.state.descriptors import StateDescriptor
from keyedstate.state.primitives.base import State

__all__ = ["ValueState", "CompiledValueState", "MemoValueState", "TtlValueState", "value_state_class",
           "bulk_value_types"]

_NOTHING_STORED = object()  # never a prefix, not even None (no current key)


class ValueState(State):
    """One value per key. ``value()`` is ``None`` when nothing is stored; ``update(None)`` clears."""

    # The stored key (current key's prefix + namespace) is kept for the prefix object it was built from (held: its
    # identity stays unique): a key's elements reuse one prefix, and a fresh key per call costs more than the test.
    __slots__ = ("_key_prefix", "_stored_key", "_entries", "_encode", "_decode")

    def __init__(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._key_prefix: Any = _NOTHING_STORED
        self._stored_key = b""
        # Held, not read per call (ValueAccess), except a memo store's entries: a closed database's must not be held
        self._entries: Any = None if isinstance(store, MemoValueAccess) else store.entries
        self._encode, self._decode = store.encode, store.decode

    def set_current_namespace(self, namespace: Any) -> None:
        State.set_current_namespace(self, namespace)
        self._key_prefix = _NOTHING_STORED

    def value(self) -> Any:
        prefix = self._backend.key_prefix
        if prefix is not self._key_prefix:
            if prefix is None:  # no current key: the store raises NoKeyContextError
                return self._store.get(self._namespace)
            self._stored_key = prefix + self._namespace
            self._key_prefix = prefix
        if self._decode is None:
            return self._entries.get(self._stored_key)
        data = self._entries.get(self._stored_key)
        try:
            value = None if data is None else self._decode(data)
        except Exception:
            return self._store.get(self._namespace)  # raises the store's error naming the state
        accepts = self._store.accepts
        if accepts is None or type(value) in self._store.exact_types or value is None or accepts(value):
            return value
        return self._store.get(self._namespace)  # raises StateTypeMismatchError

    def update(self, value: Any) -> None:
        if value is None:
            self._store.delete(self._namespace)
            return
        accepts = self._accepts
        if accepts is not None and type(value) not in self._exact_types and not accepts(value):
            self._codec.check_write(value)
        prefix = self._backend.key_prefix
        if prefix is not self._key_prefix:
            if prefix is None:
                self._store.put(self._namespace, value)  # raises NoKeyContextError
                return
            self._stored_key = prefix + self._namespace
            self._key_prefix = prefix
        if self._encode is not None:
            try:
                value = self._encode(value)
            except Exception:
                self._store.put(self._namespace, value)  # redone by the store, which raises its error naming the state
                return
        self._entries[self._stored_key] = value


class CompiledValueState(ValueState):
    """:class:`ValueState` with the common case of ``value()`` and ``update()`` (a current key, a value of the type's
    exact types or any type it accepts) in C (``keyedstate._fastpath.HeapValueAccess``), for entries kept as is."""

    __slots__ = ("_access", "value", "update")  # instance attributes holding the C calls shadow the methods

    def __init__(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._access = fastpath.HeapValueAccess(  # type: ignore[union-attr]
            entries=self._entries,
            backend=backend,
            prefix_field=KEY_PREFIX_FIELD,
            namespace=self._namespace,
            exact_types=() if self._encode else None if self._accepts is None else self._exact_types,
            slow_value=MethodType(ValueState.value, self),
            slow_update=MethodType(ValueState.update, self),
        )
        self.value = self._access.value  # type: ignore[method-assign]
        self.update = self._access.update  # type: ignore[method-assign]

    def set_current_namespace(self, namespace: Any) -> None:
        ValueState.set_current_namespace(self, namespace)
        self._access.set_namespace(self._namespace)


class MemoValueState(ValueState):
    """A :class:`ValueState` over a :class:`~keyedstate.state.base.stores.MemoValueAccess` that encodes its entries
    (``encode``, ``decode`` not None): a run of one key's elements reads the entries at most once, writes them once.

    While its store holds a database that started empty (a key group's first call in RocksDB mode), the store may
    lend it a dict of the values written so far instead (:meth:`start_bulk`): ``value()`` and ``update()`` are then
    the compiled ones of :class:`CompiledValueState` over that dict, for values that no later mutation can change
    (the store encodes and writes them all at once when anything else needs its entries, see
    ``RocksDBValueStore.end_bulk``); any other call ends it first. Without the compiled fast path there is no bulk
    mode: the memo path below is its declared twin (``tests/state/test_bulk_value_state.py`` runs the two side by
    side)."""

    __slots__ = ("value", "update", "_bulk")  # instance attributes holding the calls in use shadow the methods

    def __init__(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._bulk: Any = None
        self._use_memo()
        attach = getattr(store, "attach_state", None)
        if attach is not None:
            attach(self)

    def _use_memo(self) -> None:
        self.value = MethodType(MemoValueState._memo_value, self)  # type: ignore[method-assign]
        self.update = MethodType(MemoValueState._memo_update, self)  # type: ignore[method-assign]

    @staticmethod
    def can_bulk() -> bool:
        """Whether :meth:`start_bulk` may be called: only with the compiled fast path."""
        return fastpath is not None

    def start_bulk(self, values: dict, exact_types: frozenset, tuple_items: Optional[frozenset]) -> None:
        """Read and write ``values`` (stored key -> value, held as is) until :meth:`end_bulk`; ``exact_types``: the
        types stored as they are, ``tuple_items``: the item types of tuples stored as they are (None: no tuple)."""
        assert fastpath is not None
        self._bulk = fastpath.HeapValueAccess(
            entries=values, backend=self._backend, prefix_field=KEY_PREFIX_FIELD, namespace=self._namespace,
            exact_types=exact_types, tuple_items=tuple_items,
            slow_value=MethodType(MemoValueState._bulk_slow_value, self),
            slow_update=MethodType(MemoValueState._bulk_slow_update, self),
        )
        self.value = self._bulk.value  # type: ignore[method-assign]
        self.update = self._bulk.update  # type: ignore[method-assign]

    def end_bulk(self) -> None:
        if self._bulk is not None:
            self._bulk = None
            self._use_memo()

    def _bulk_slow_value(self) -> Any:
        self._store.end_bulk()  # no current key: the memo path raises NoKeyContextError
        self.end_bulk()
        return self.value()

    def _bulk_slow_update(self, value: Any) -> None:
        self._store.end_bulk()  # a clear, a value to check or to copy, no current key: the memo path does it all
        self.end_bulk()
        self.update(value)

    def set_current_namespace(self, namespace: Any) -> None:
        ValueState.set_current_namespace(self, namespace)
        if self._bulk is not None:
            self._bulk.set_namespace(self._namespace)

    def _memo_value(self) -> Any:
        store = self._store
        prefix = self._backend.key_prefix
        if prefix is not self._key_prefix:
            if prefix is None:
                return store.get(self._namespace)  # raises NoKeyContextError
            self._stored_key = prefix + self._namespace
            self._key_prefix = prefix
        stored_key = self._stored_key
        data = None
        if store.memo_key is stored_key:  # the entry this state last wrote or read, for this very key
            value = store.memo_value
            if value is not NOT_KEPT:
                return value
            data = store.memo_data
        if data is None:
            entries = store.entries
            pending = store.memo_data
            try:
                if pending is not None:  # write_pending() inline: the previous key's entry, written back
                    store.memo_data = None
                    entries.put(store.memo_key, pending)
                data = entries.get(stored_key)
            except Exception:
                if pending is not None and store.memo_data is None:
                    store.memo_data = pending  # not written: the store's write_pending() retries and names it
                    store.write_pending()
                return store.get(self._namespace)  # raises the store's error naming the state and the database
            if data is None:
                store.memo_key, store.memo_value = stored_key, None
                return None
        try:
            value = store.decode(data)
        except Exception:
            return store.get(self._namespace)
        accepts = store.accepts
        kind = type(value)
        if accepts is None or kind in store.exact_types or value is None or accepts(value):
            if store.memo_key is not stored_key:
                store.memo_key = stored_key
                store.memo_value = value if kind in _IMMUTABLE_SCALARS or (
                    kind is tuple and _IMMUTABLE_SCALARS.issuperset(map(type, value))) else NOT_KEPT
            return value
        return store.get(self._namespace)  # raises StateTypeMismatchError

    def _memo_update(self, value: Any) -> None:
        if value is None:
            self._store.delete(self._namespace)
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
            data = store.encode(value)  # now: a value that cannot be stored fails at update()
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


def bulk_value_types(type_info: Any) -> Optional[tuple[frozenset, Optional[frozenset]]]:
    """``(exact types, tuple item types)`` :meth:`MemoValueState.start_bulk` keeps as they are for values of
    ``type_info`` (the immutable ones above that it accepts), or None when it has no bulk mode: a serializer of the
    user's may refuse a value only when it encodes it, too late for the ``update()`` that gave it."""
    if type(type_info.serializer) not in (DefaultValueCodec, PickleValueCodec):
        return None
    accepts_any = type_info.accepts_any
    exact = frozenset(kind for kind in _IMMUTABLE_SCALARS if accepts_any or kind in type_info.exact_types)
    items = _IMMUTABLE_SCALARS if accepts_any or tuple in type_info.exact_types else None
    return exact, items


def value_state_class(store: Any) -> type[ValueState]:
    """The ValueState without TTL for ``store``: the memo one for a memo store, else the compiled twin where it is
    built and covers the store (a dict of entries stored as is, no write validation), else the write-through one."""
    if isinstance(store, MemoValueAccess):
        return MemoValueState
    if fastpath is not None and type(store.entries) is dict and store.encode is None and store.decode is None:
        return CompiledValueState
    return ValueState


class TtlValueState(ValueState):
    """``ValueState`` with a TTL: an expired value is removed by the read that finds it."""

    __slots__ = ()

    def value(self) -> Any:
        namespace = self._namespace
        entry = self._store.get(namespace)
        if entry is None:
            return None
        value, last_access = entry
        now = self._now()
        if last_access + self._ttl <= now:
            self._store.delete(namespace)
            return value if self._return_expired else None
        if self._update_on_read:
            self._store.put(namespace, (value, now))
        return value

    def update(self, value: Any) -> None:
        if value is None:
            self._store.delete(self._namespace)
            return
        self._check(value)
        self._store.put(self._namespace, (value, self._now()))
