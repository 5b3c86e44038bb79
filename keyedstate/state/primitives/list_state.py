"""List state, and its TTL variant (every element expires on its own: ``(element, last_access)`` per element)."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from keyedstate.errors import ConfigurationError, StateTypeMismatchError
from keyedstate.state.primitives.base import State

__all__ = ["ListState", "TtlListState"]


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

    def _entries(self, values: list[Any]) -> list[Any]:
        """Checked values as the store keeps them."""
        return values

    def add_all(self, values: Iterable[Any]) -> None:
        checked = self._checked(values)
        if checked:
            self._store.append(self._namespace, self._entries(checked))

    def update(self, values: Iterable[Any] | None) -> None:
        """Replace the list; ``None`` or an empty list clears it."""
        if values is None:
            self._store.delete(self._namespace)
            return
        self._store.replace(self._namespace, self._entries(self._checked(values)))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())


class TtlListState(ListState):
    """``ListState`` with a TTL: a read drops the expired elements and keeps the others."""

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

    def _entries(self, values: list[Any]) -> list[Any]:
        now = self._now()
        return [(value, now) for value in values]
