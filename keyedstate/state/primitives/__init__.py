"""Keyed state primitives with PyFlink's method names, independent of the backend.

Each primitive reads and writes the backend's current key (and the primitive's namespace). Time-to-live is applied
here, once for every backend, following Flink's ``AbstractTtlDecorator``: an entry is expired iff
``last_access + ttl <= now``; reading an expired entry removes it (and returns it once only with
``ReturnExpiredIfNotCleanedUp``); ``OnReadAndWrite`` refreshes the timestamp on every successful read. List state
expires per element and map state per map key.

Values returned by the heap backend are the stored objects themselves (as in Flink's heap backend): mutate a value
only together with ``update``; the RocksDB backend always returns fresh copies.

One module per state kind, each beside its TTL variant; :func:`create_primitive` picks the class for a descriptor.
"""

from __future__ import annotations

from typing import Any

from keyedstate.state.base.layout import EntryCodec
from keyedstate.state.descriptors import StateDescriptor, StateKind
from keyedstate.state.primitives.base import State
from keyedstate.state.primitives.folding_states import (
    AggregatingState,
    ReducingState,
    TtlAggregatingState,
    TtlReducingState,
)
from keyedstate.state.primitives.list_state import ListState, TtlListState
from keyedstate.state.primitives.map_state import MapState, TtlMapState
from keyedstate.state.primitives.value_state import TtlValueState, ValueState, value_state_class

__all__ = [
    "State",
    "ValueState",
    "ListState",
    "MapState",
    "ReducingState",
    "AggregatingState",
    "create_primitive",
]

_PRIMITIVES = {
    (StateKind.VALUE, True): TtlValueState,
    (StateKind.LIST, False): ListState,
    (StateKind.LIST, True): TtlListState,
    (StateKind.MAP, False): MapState,
    (StateKind.MAP, True): TtlMapState,
    (StateKind.REDUCING, False): ReducingState,
    (StateKind.REDUCING, True): TtlReducingState,
    (StateKind.AGGREGATING, False): AggregatingState,
    (StateKind.AGGREGATING, True): TtlAggregatingState,
}


def create_primitive(descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> State:
    """The primitive of ``descriptor``'s kind over ``store``: its TTL variant when the descriptor has a TTL."""
    if descriptor.kind is StateKind.VALUE and descriptor.ttl_config is None:
        return value_state_class(store)(descriptor, codec, store, backend)
    return _PRIMITIVES[(descriptor.kind, descriptor.ttl_config is not None)](descriptor, codec, store, backend)
