"""What a backend must provide per registered state: stores addressed by the backend's current key.

Every method works on the current key (set with ``KeyedStateBackend.set_current_key``) and the encoded namespace
passed in. Entries are the value, or ``(value, last_access_ms)`` when the state has a TTL; the TTL logic itself
lives in the backend-independent primitives, never in a store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Collection, Iterable, Iterator, Optional, Protocol, runtime_checkable

__all__ = ["MISSING", "NOT_KEPT", "ValueStore", "ValueAccess", "MemoValueAccess", "ListStore", "MapStore", "RawColumn"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Returned by :meth:`MapStore.get` for an absent map key (``None`` is a valid map value)."""

NOT_KEPT: Any = object()
"""``MemoValueAccess.memo_value`` when only the entry is kept (a value is handed out twice only if immutable)."""


class ValueStore(ABC):
    """One entry per (key, namespace)."""

    @abstractmethod
    def get(self, namespace: bytes) -> Any:
        """The entry, or ``None`` when absent."""

    @abstractmethod
    def put(self, namespace: bytes, entry: Any) -> None: ...

    @abstractmethod
    def delete(self, namespace: bytes) -> None: ...


class ValueAccess(Protocol):
    """What a value store lends the ValueStates of :mod:`keyedstate.state.primitives.value_state` (and their compiled
    twin) to do its work in their frame; its methods stay the slow path, which names the state in its errors.
    ``entries``: stored key -> entry (``get``, None when absent; ``entries[key] = entry``, or ``put`` in a memo store,
    the only kind that replaces it, with its database). ``encode``/``decode``: value <-> entry, the store's one
    definition of its entry format (None: as is; ``encode`` raises for a value it cannot keep).
    ``accepts``/``exact_types``: the check a decoded value must pass (None: none)."""

    entries: Any
    encode: Optional[Callable[[Any], Any]]
    decode: Optional[Callable[[Any], Any]]
    accepts: Optional[Callable[[Any], bool]]
    exact_types: Collection[type]


@runtime_checkable
class MemoValueAccess(ValueAccess, Protocol):
    """A :class:`ValueAccess` keeping the entry last written or read: ``memo_key`` (its stored key, or None),
    ``memo_value`` (its value, :data:`NOT_KEPT` when only the entry is kept), ``memo_data`` (the entry while not yet
    written, else None), written when another key is written or by ``write_pending()`` before anything else reads
    the entries. Elements arrive in runs of one key: a key updated for every element is written once per run."""

    memo_key: Optional[bytes]
    memo_value: Any
    memo_data: Any

    def write_pending(self) -> None: ...


class ListStore(ABC):
    """An ordered list of entries per (key, namespace)."""

    @abstractmethod
    def get(self, namespace: bytes) -> list[Any]:
        """All entries in insertion order; an empty list when absent."""

    @abstractmethod
    def append(self, namespace: bytes, entries: list[Any]) -> None:
        """Append without rewriting what is stored."""

    @abstractmethod
    def replace(self, namespace: bytes, entries: list[Any]) -> None:
        """Replace the whole list; an empty list deletes it."""

    @abstractmethod
    def delete(self, namespace: bytes) -> None: ...


class MapStore(ABC):
    """A map of user key -> entry per (key, namespace)."""

    @abstractmethod
    def get(self, namespace: bytes, user_key: Any) -> Any:
        """The entry, or :data:`MISSING`."""

    @abstractmethod
    def put(self, namespace: bytes, user_key: Any, entry: Any) -> None: ...

    @abstractmethod
    def put_all(self, namespace: bytes, entries: dict[Any, Any]) -> None: ...

    @abstractmethod
    def remove(self, namespace: bytes, user_key: Any) -> None: ...

    @abstractmethod
    def contains(self, namespace: bytes, user_key: Any) -> bool: ...

    @abstractmethod
    def items(self, namespace: bytes) -> Iterator[tuple[Any, Any]]:
        """(user key, entry) pairs; RocksDB yields them in encoded-key order, the heap in insertion order."""

    @abstractmethod
    def is_empty(self, namespace: bytes) -> bool: ...

    @abstractmethod
    def delete(self, namespace: bytes) -> None: ...


class RawColumn(ABC):
    """An ordered bytes -> bytes map owned by an internal service (the timer service), stored and snapshotted with
    the keyed state.

    Every key must start with the 2-byte key-group prefix: restore keeps exactly the key groups the backend owns.
    Iteration is in ascending byte order on both backends.
    """

    name: str

    @abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    @abstractmethod
    def put(self, key: bytes, value: bytes) -> None: ...

    @abstractmethod
    def delete(self, key: bytes) -> None: ...

    @abstractmethod
    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with ``start <= key < end`` (either bound may be open), ascending."""

    @abstractmethod
    def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete every key with ``start <= key < end``."""

    def put_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        for key, value in pairs:
            self.put(key, value)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The value of each key (None where absent), in order."""
        return [self.get(key) for key in keys]

    def clear(self) -> None:
        self.delete_range(b"\x00\x00", b"\xff\xff\xff")
