"""The heap (in-memory dict) keyed state backend."""

from keyedstate.state.heap.backend import HeapKeyedStateBackend

__all__ = ["HeapKeyedStateBackend"]
