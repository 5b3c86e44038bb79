"""Value state, and its TTL variant (the stored entry is ``(value, last_access)``)."""

from __future__ import annotations

from typing import Any

from keyedstate.state.primitives.base import State

__all__ = ["ValueState", "TtlValueState"]


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
