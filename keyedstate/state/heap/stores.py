"""Heap (dict) stores: entries live as Python objects in ``entries``, keyed by the shared stored-key layout."""

from __future__ import annotations

from typing import Any, Iterator

from sortedcontainers import SortedDict

from keyedstate.state.base.layout import EntryCodec
from keyedstate.state.base.stores import MISSING, ListStore, MapStore, RawColumn, ValueStore

__all__ = ["HeapValueStore", "HeapListStore", "HeapMapStore", "HeapRawColumn", "write_validator"]

# Values of these types always serialize, so validating them on write would only cost time.
_ALWAYS_SERIALIZABLE = frozenset((int, float, str, bytes, bool))


def write_validator(codec: EntryCodec, enabled: bool) -> Any:
    """A function that serializes an entry once to reject unserializable values at write time (returning it), or None.

    The heap keeps objects and serializes only when snapshotting; without this an unpicklable value would be
    accepted now and make every later snapshot fail.
    """
    if not enabled:
        return None
    serialize = codec.serialize_entry
    has_ttl = codec.has_ttl

    def validate(entry: Any) -> Any:
        value = entry[0] if has_ttl else entry
        if type(value) not in _ALWAYS_SERIALIZABLE:
            serialize(entry)
        return entry

    return validate


class HeapValueStore(ValueStore):
    """A :class:`~keyedstate.state.base.stores.ValueAccess` keeping values as is; ``encode``: the write validator."""

    __slots__ = ("entries", "_backend", "encode")
    decode = accepts = None
    exact_types: frozenset[type] = frozenset()

    def __init__(self, backend: Any, validate: Any = None) -> None:
        self.entries: dict[bytes, Any] = {}
        self._backend = backend
        self.encode = validate

    # get and put run once per state access: the backend's ``composite`` is inlined (its field, not its method)
    def get(self, namespace: bytes) -> Any:
        try:
            return self.entries.get(self._backend.key_prefix + namespace)
        except TypeError:  # no current key (prefix None): composite raises the right error
            return self.entries.get(self._backend.composite(namespace))

    def put(self, namespace: bytes, entry: Any) -> None:
        try:
            key = self._backend.key_prefix + namespace
        except TypeError:
            key = self._backend.composite(namespace)
        self.entries[key] = entry if self.encode is None else self.encode(entry)

    def delete(self, namespace: bytes) -> None:
        self.entries.pop(self._backend.composite(namespace), None)


class HeapListStore(ListStore):
    __slots__ = ("entries", "_backend", "_validate")

    def __init__(self, backend: Any, validate: Any = None) -> None:
        self.entries: dict[bytes, list[Any]] = {}
        self._backend = backend
        self._validate = validate

    def _check(self, entries: list[Any]) -> None:
        if self._validate is not None:
            for entry in entries:
                self._validate(entry)

    def get(self, namespace: bytes) -> list[Any]:
        entries = self.entries.get(self._backend.composite(namespace))
        return [] if entries is None else list(entries)

    def append(self, namespace: bytes, entries: list[Any]) -> None:
        key = self._backend.composite(namespace)
        self._check(entries)
        stored = self.entries.get(key)
        if stored is None:
            self.entries[key] = list(entries)
        else:
            stored.extend(entries)

    def replace(self, namespace: bytes, entries: list[Any]) -> None:
        key = self._backend.composite(namespace)
        self._check(entries)
        if entries:
            self.entries[key] = list(entries)
        else:
            self.entries.pop(key, None)

    def delete(self, namespace: bytes) -> None:
        self.entries.pop(self._backend.composite(namespace), None)


class HeapMapStore(MapStore):
    """Inner maps are keyed by the encoded map key, so two map keys are equal exactly when RocksDB finds them equal
    (``1`` and ``True`` stay distinct); values are ``(user key, entry)``."""

    __slots__ = ("entries", "_backend", "_encode", "_validate")

    def __init__(self, backend: Any, codec: EntryCodec, validate: Any = None) -> None:
        self.entries: dict[bytes, dict[bytes, tuple[Any, Any]]] = {}
        self._backend = backend
        self._encode = codec.serialize_map_key
        self._validate = validate

    def get(self, namespace: bytes, user_key: Any) -> Any:
        inner = self.entries.get(self._backend.composite(namespace))
        if inner is None:
            return MISSING
        pair = inner.get(self._encode(user_key))
        return MISSING if pair is None else pair[1]

    def put(self, namespace: bytes, user_key: Any, entry: Any) -> None:
        encoded = self._encode(user_key)
        key = self._backend.composite(namespace)
        if self._validate is not None:
            self._validate(entry)
        inner = self.entries.get(key)
        if inner is None:
            inner = self.entries[key] = {}
        inner[encoded] = (user_key, entry)

    def put_all(self, namespace: bytes, entries: dict[Any, Any]) -> None:
        encoded = {self._encode(user_key): (user_key, entry) for user_key, entry in entries.items()}
        key = self._backend.composite(namespace)
        if self._validate is not None:
            for entry in entries.values():
                self._validate(entry)
        inner = self.entries.get(key)
        if inner is None:
            self.entries[key] = encoded
        else:
            inner.update(encoded)

    def remove(self, namespace: bytes, user_key: Any) -> None:
        key = self._backend.composite(namespace)
        inner = self.entries.get(key)
        if inner is not None:
            inner.pop(self._encode(user_key), None)
            if not inner:
                del self.entries[key]

    def contains(self, namespace: bytes, user_key: Any) -> bool:
        inner = self.entries.get(self._backend.composite(namespace))
        return inner is not None and self._encode(user_key) in inner

    def items(self, namespace: bytes) -> Iterator[tuple[Any, Any]]:
        inner = self.entries.get(self._backend.composite(namespace))
        if not inner:
            return iter(())
        # A copy, so the caller may modify the map while iterating (as Flink's iterators allow).
        return iter(list(inner.values()))

    def is_empty(self, namespace: bytes) -> bool:
        return not self.entries.get(self._backend.composite(namespace))

    def delete(self, namespace: bytes) -> None:
        self.entries.pop(self._backend.composite(namespace), None)


class HeapRawColumn(RawColumn):
    """A sorted in-memory bytes map."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.data: SortedDict = SortedDict()

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        data = self.data
        for key in list(data.irange(start, end, inclusive=(True, False))):
            value = data.get(key)
            if value is not None:
                yield key, value

    def delete_range(self, start: bytes, end: bytes) -> None:
        for key in list(self.data.irange(start, end, inclusive=(True, False))):
            del self.data[key]

    def clear(self) -> None:
        self.data.clear()

    def __len__(self) -> int:
        return len(self.data)
