"""Reducing and aggregating state: one value per key, folded into on every ``add``; and their TTL variants."""

from __future__ import annotations

from typing import Any

from keyedstate.errors import StateTypeMismatchError
from keyedstate.state.base.layout import EntryCodec
from keyedstate.state.descriptors import StateDescriptor
from keyedstate.state.primitives.base import State
from keyedstate.state.primitives.value_state import TtlValueState

__all__ = ["ReducingState", "AggregatingState", "TtlReducingState", "TtlAggregatingState"]


class _FoldingState(State):
    """One value per key that ``add`` folds into; the TTL variants store ``(value, last_access)`` instead."""

    __slots__ = ("_function",)
    _FUNCTION_FIELD = ""  # the descriptor's attribute holding the fold function

    def __init__(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> None:
        super().__init__(descriptor, codec, store, backend)
        self._function = getattr(descriptor, self._FUNCTION_FIELD)

    def _read(self) -> Any:
        return self._store.get(self._namespace)

    def _write(self, value: Any) -> None:
        self._store.put(self._namespace, value)


class ReducingState(_FoldingState):
    """A value per key folded with the descriptor's reduce function on every ``add``."""

    __slots__ = ()
    _FUNCTION_FIELD = "reduce"

    def get(self) -> Any:
        return self._read()

    def add(self, value: Any) -> None:
        if value is None:
            raise StateTypeMismatchError(f"reducing state {self.name!r} cannot add None")
        self._check(value)
        current = self._read()
        reduced = value if current is None else self._function(current, value)
        self._check(reduced)
        self._write(reduced)


class AggregatingState(_FoldingState):
    """An accumulator per key; ``add`` folds a value in, ``get`` returns ``get_result(accumulator)``."""

    __slots__ = ()
    _FUNCTION_FIELD = "agg_function"

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


class _TtlFoldingMixin:
    """TTL read/write for reducing and aggregating state (the stored entry is ``(value, last_access)``)."""

    __slots__ = ()

    def _read(self) -> Any:
        return TtlValueState.value(self)  # type: ignore[arg-type]

    def _write(self, value: Any) -> None:
        self._store.put(self._namespace, (value, self._now()))  # type: ignore[attr-defined]


class TtlReducingState(_TtlFoldingMixin, ReducingState):
    __slots__ = ()


class TtlAggregatingState(_TtlFoldingMixin, AggregatingState):
    __slots__ = ()
