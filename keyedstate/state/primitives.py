"""Keyed state primitives with PyFlink's method names, independent of the backend.

Each primitive reads and writes the backend's current key (and the primitive's namespace). Time-to-live is applied
here, once for every backend, following Flink's ``AbstractTtlDecorator``: an entry is expired iff
``last_access + ttl <= now``; reading an expired entry removes it (and returns it once only with
``ReturnExpiredIfNotCleanedUp``); ``OnReadAndWrite`` refreshes the timestamp on every successful read. List state
expires per element and map state per map key.

Values returned by the heap backend are the stored objects themselves (as in Flink's heap backend): mutate a value
only together with ``update``; the RocksDB backend always returns fresh copies.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from keyedstate.errors import ConfigurationError, StateTypeMismatchError
from keyedstate.serialization import encode_key
from keyedstate.state.base.layout import VOID_NAMESPACE, EntryCodec
from keyedstate.state.base.stores import MISSING
from keyedstate.state.descriptors import StateDescriptor, StateKind

__all__ = [
    "State",
    "ValueState",
    "ListState",
    "MapState",
    "ReducingState",
    "AggregatingState",
    "create_primitive",
]


class State:
    """Common base: the descriptor, the store and the namespace of one registered state."""

    __slots__ = ("_descriptor", "_codec", "_store", "_backend", "_namespace", "_accepts", "_exact_types", "_ttl", "_return_expired",
                 "_update_on_read")

    def __init__(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> None:
        self._descriptor = descriptor
        self._codec = codec
        self._store = store
        self._backend = backend
        self._namespace = VOID_NAMESPACE
        accepts = descriptor.type_info.accepts
        self._accepts = None if descriptor.type_info.accepts_any else accepts
        self._exact_types = descriptor.type_info.exact_types
        ttl = descriptor.ttl_config
        self._ttl = ttl.ttl_millis if ttl else 0
        self._return_expired = bool(ttl and ttl.return_expired)
        self._update_on_read = bool(ttl and ttl.update_on_read)

    @property
    def name(self) -> str:
        return self._descriptor.name

    def set_current_namespace(self, namespace: Any) -> None:
        """Scope further access to ``namespace`` (windows use this; keyed process functions never need it)."""
        self._namespace = VOID_NAMESPACE if namespace is None else encode_key(namespace)

    def _check(self, value: Any) -> None:
        accepts = self._accepts
        if accepts is not None and value is not None and type(value) not in self._exact_types and not accepts(value):
            self._codec.check_write(value)

    def _now(self) -> int:
        return self._backend.ttl_clock()

    def clear(self) -> None:
        """Remove the current key's state."""
        self._store.delete(self._namespace)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._descriptor.name!r})"


class ValueState(State):
    """One value per key. ``value()`` is ``None`` when nothing is stored; ``update(None)`` clears."""

    __slots__ = ()

    def value(self) -> Any:
        return self._store.get(self._namespace)

    def update(self, value: Any) -> None:
        if value is None:
            self._store.delete(self._namespace)
            return
        accepts = self._accepts
        if accepts is not None and type(value) not in self._exact_types and not accepts(value):
            self._codec.check_write(value)
        self._store.put(self._namespace, value)


class _TtlValueState(ValueState):
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


class ListState(State):
    """A list per key. ``get()`` returns a new list (empty when nothing is stored); ``add`` appends."""

    __slots__ = ()

    def get(self) -> list[Any]:
        return self._store.get(self._namespace)

    def _checked(self, values: Iterable[Any]) -> list[Any]:
        if values is None or isinstance(values, (str, bytes, dict)):
            raise ConfigurationError(
                f"list state {self.name!r}: expected an iterable of values, got {type(values).__qualname__}"
            )
        checked = list(values)
        for value in checked:
            if value is None:
                raise StateTypeMismatchError(f"list state {self.name!r} cannot hold None elements (as in Flink)")
            self._check(value)
        return checked

    def add(self, value: Any) -> None:
        if value is None:
            raise StateTypeMismatchError(f"list state {self.name!r} cannot hold None elements (as in Flink)")
        self._check(value)
        self._store.append(self._namespace, [value])

    def add_all(self, values: Iterable[Any]) -> None:
        checked = self._checked(values)
        if checked:
            self._store.append(self._namespace, checked)

    def update(self, values: Iterable[Any] | None) -> None:
        """Replace the list; ``None`` or an empty list clears it."""
        if values is None:
            self._store.delete(self._namespace)
            return
        self._store.replace(self._namespace, self._checked(values))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())


class _TtlListState(ListState):
    __slots__ = ()

    def get(self) -> list[Any]:
        namespace = self._namespace
        entries = self._store.get(namespace)
        if not entries:
            return entries
        now = self._now()
        ttl = self._ttl
        alive = [entry for entry in entries if entry[1] + ttl > now]
        result = [entry[0] for entry in (entries if self._return_expired else alive)]
        if self._update_on_read:
            self._store.replace(namespace, [(entry[0], now) for entry in alive])
        elif len(alive) != len(entries):
            self._store.replace(namespace, alive)
        return result

    def add(self, value: Any) -> None:
        if value is None:
            raise StateTypeMismatchError(f"list state {self.name!r} cannot hold None elements (as in Flink)")
        self._check(value)
        self._store.append(self._namespace, [(value, self._now())])

    def add_all(self, values: Iterable[Any]) -> None:
        checked = self._checked(values)
        if checked:
            now = self._now()
            self._store.append(self._namespace, [(value, now) for value in checked])

    def update(self, values: Iterable[Any] | None) -> None:
        if values is None:
            self._store.delete(self._namespace)
            return
        now = self._now()
        self._store.replace(self._namespace, [(value, now) for value in self._checked(values)])


class MapState(State):
    """A map per key. Map keys are encoded like stream keys (str, int, bytes, tuples, ...)."""

    __slots__ = ()

    def get(self, key: Any) -> Any:
        """The value for ``key``, or ``None`` when absent."""
        entry = self._store.get(self._namespace, key)
        return None if entry is MISSING else entry

    def put(self, key: Any, value: Any) -> None:
        self._check(value)
        self._store.put(self._namespace, key, value)

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        if not isinstance(dict_value, dict):
            raise ConfigurationError(f"map state {self.name!r}: put_all takes a dict, got {type(dict_value).__qualname__}")
        for value in dict_value.values():
            self._check(value)
        self._store.put_all(self._namespace, dict_value)

    def remove(self, key: Any) -> None:
        self._store.remove(self._namespace, key)

    def contains(self, key: Any) -> bool:
        return self._store.contains(self._namespace, key)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return self._store.items(self._namespace)

    def keys(self) -> Iterator[Any]:
        return (key for key, _ in self.items())

    def values(self) -> Iterator[Any]:
        return (value for _, value in self.items())

    def is_empty(self) -> bool:
        return self._store.is_empty(self._namespace)

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        self.remove(key)

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[Any]:
        return self.keys()


class _TtlMapState(MapState):
    __slots__ = ()

    def _alive(self, key: Any, entry: Any, now: int) -> Any:
        """The value if the entry is readable; removes expired entries. Returns MISSING when not readable."""
        value, last_access = entry
        if last_access + self._ttl <= now:
            self._store.remove(self._namespace, key)
            return value if self._return_expired else MISSING
        if self._update_on_read:
            self._store.put(self._namespace, key, (value, now))
        return value

    def get(self, key: Any) -> Any:
        entry = self._store.get(self._namespace, key)
        if entry is MISSING:
            return None
        value = self._alive(key, entry, self._now())
        return None if value is MISSING else value

    def put(self, key: Any, value: Any) -> None:
        self._check(value)
        self._store.put(self._namespace, key, (value, self._now()))

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        if not isinstance(dict_value, dict):
            raise ConfigurationError(f"map state {self.name!r}: put_all takes a dict, got {type(dict_value).__qualname__}")
        for value in dict_value.values():
            self._check(value)
        now = self._now()
        self._store.put_all(self._namespace, {key: (value, now) for key, value in dict_value.items()})

    def contains(self, key: Any) -> bool:
        entry = self._store.get(self._namespace, key)
        return entry is not MISSING and self._alive(key, entry, self._now()) is not MISSING

    def items(self) -> Iterator[tuple[Any, Any]]:
        now = self._now()
        ttl = self._ttl
        readable: list[tuple[Any, Any]] = []
        expired: list[Any] = []
        for key, (value, last_access) in list(self._store.items(self._namespace)):
            if last_access + ttl <= now:
                expired.append(key)
                if self._return_expired:
                    readable.append((key, value))
            else:
                readable.append((key, value))
        for key in expired:
            self._store.remove(self._namespace, key)
        if self._update_on_read and readable:
            expired_keys = set(expired)
            alive = {key: (value, now) for key, value in readable if key not in expired_keys}
            if alive:
                self._store.put_all(self._namespace, alive)
        return iter(readable)

    def is_empty(self) -> bool:
        for _ in self.items():
            return False
        return True


class ReducingState(State):
    """A value per key folded with the descriptor's reduce function on every ``add``."""

    __slots__ = ("_reduce",)

    def __init__(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._reduce = descriptor.reduce  # type: ignore[attr-defined]

    def _read(self) -> Any:
        return self._store.get(self._namespace)

    def _write(self, value: Any) -> None:
        self._store.put(self._namespace, value)

    def get(self) -> Any:
        return self._read()

    def add(self, value: Any) -> None:
        if value is None:
            raise StateTypeMismatchError(f"reducing state {self.name!r} cannot add None")
        self._check(value)
        current = self._read()
        reduced = value if current is None else self._reduce(current, value)
        self._check(reduced)
        self._write(reduced)


class AggregatingState(State):
    """An accumulator per key; ``add`` folds a value in, ``get`` returns ``get_result(accumulator)``."""

    __slots__ = ("_function",)

    def __init__(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._function = descriptor.agg_function  # type: ignore[attr-defined]

    def _read(self) -> Any:
        return self._store.get(self._namespace)

    def _write(self, value: Any) -> None:
        self._store.put(self._namespace, value)

    def get(self) -> Any:
        accumulator = self._read()
        return None if accumulator is None else self._function.get_result(accumulator)

    def add(self, value: Any) -> None:
        accumulator = self._read()
        if accumulator is None:
            accumulator = self._function.create_accumulator()
        accumulator = self._function.add(value, accumulator)
        self._check(accumulator)
        self._write(accumulator)


class _TtlSingleValueMixin:
    """TTL read/write for reducing and aggregating state (the stored entry is ``(value, last_access)``)."""

    __slots__ = ()

    def _read(self) -> Any:
        return _TtlValueState.value(self)  # type: ignore[arg-type]

    def _write(self, value: Any) -> None:
        self._store.put(self._namespace, (value, self._now()))  # type: ignore[attr-defined]


class _TtlReducingState(_TtlSingleValueMixin, ReducingState):
    __slots__ = ()


class _TtlAggregatingState(_TtlSingleValueMixin, AggregatingState):
    __slots__ = ()


_PRIMITIVES = {
    (StateKind.VALUE, False): ValueState,
    (StateKind.VALUE, True): _TtlValueState,
    (StateKind.LIST, False): ListState,
    (StateKind.LIST, True): _TtlListState,
    (StateKind.MAP, False): MapState,
    (StateKind.MAP, True): _TtlMapState,
    (StateKind.REDUCING, False): ReducingState,
    (StateKind.REDUCING, True): _TtlReducingState,
    (StateKind.AGGREGATING, False): AggregatingState,
    (StateKind.AGGREGATING, True): _TtlAggregatingState,
}


def create_primitive(descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> State:
    return _PRIMITIVES[(descriptor.kind, descriptor.ttl_config is not None)](descriptor, codec, store, backend)
