"""What a backend must provide per registered state: stores addressed by the backend's current key.

Every method works on the current key (set with ``KeyedStateBackend.set_current_key``) and the encoded namespace
passed in. Entries are the value, or ``(value, last_access_ms)`` when the state has a TTL; the TTL logic itself
lives in the backend-independent primitives, never in a store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterable, Iterator

__all__ = ["MISSING", "ValueStore", "ListStore", "MapStore", "RawColumn"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Returned by :meth:`MapStore.get` for an absent map key (``None`` is a valid map value)."""


class ValueStore(ABC):
    """One entry per (key, namespace)."""

    @abstractmethod
    def get(self, namespace: bytes) -> Any:
        """The entry, or ``None`` when absent."""

    @abstractmethod
    def put(self, namespace: bytes, entry: Any) -> None: ...

    @abstractmethod
    def delete(self, namespace: bytes) -> None: ...


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
