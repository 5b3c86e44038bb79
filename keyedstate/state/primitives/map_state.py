"""Map state, and its TTL variant (every map key expires on its own: ``(value, last_access)`` per map key)."""

from __future__ import annotations

from typing import Any, Iterator

from keyedstate.errors import ConfigurationError
from keyedstate.state.base.stores import MISSING
from keyedstate.state.primitives.base import State

__all__ = ["MapState", "TtlMapState"]


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
            raise ConfigurationError(
                f"map state {self.name!r}: put_all takes a dict, got {type(dict_value).__qualname__}")
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


class TtlMapState(MapState):
    """``MapState`` with a TTL: a read removes the expired map keys it meets."""

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
            raise ConfigurationError(
                f"map state {self.name!r}: put_all takes a dict, got {type(dict_value).__qualname__}")
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
