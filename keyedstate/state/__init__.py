"""Keyed state: descriptors, TTL, primitives and backends."""

from keyedstate.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from keyedstate.state.functions import AggregateFunction, ReduceFunction
from keyedstate.state.primitives import AggregatingState, ListState, MapState, ReducingState, State, ValueState
from keyedstate.state.ttl import StateTtlConfig, Time

__all__ = [
    "AggregatingStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "StateDescriptor",
    "StateKind",
    "ValueStateDescriptor",
    "AggregateFunction",
    "ReduceFunction",
    "AggregatingState",
    "ListState",
    "MapState",
    "ReducingState",
    "State",
    "ValueState",
    "StateTtlConfig",
    "Time",
]
