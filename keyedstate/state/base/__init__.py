"""Backend interfaces shared by every keyed state backend."""

from keyedstate.state.base.backend import KeyedStateBackend, RegisteredState, StateMetadata, TtlClock, system_clock_ms
from keyedstate.state.base.layout import VOID_NAMESPACE, EntryCodec
from keyedstate.state.base.stores import MISSING, ListStore, MapStore, RawColumn, ValueStore

__all__ = [
    "KeyedStateBackend",
    "RegisteredState",
    "StateMetadata",
    "TtlClock",
    "system_clock_ms",
    "VOID_NAMESPACE",
    "EntryCodec",
    "MISSING",
    "ValueStore",
    "ListStore",
    "MapStore",
    "RawColumn",
]
