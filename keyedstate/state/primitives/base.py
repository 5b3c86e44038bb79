"""What every state primitive shares: its descriptor, store and namespace, the write type check and the TTL clock."""

from __future__ import annotations

from typing import Any

from keyedstate.serialization import encode_key
from keyedstate.state.base.layout import VOID_NAMESPACE, EntryCodec
from keyedstate.state.descriptors import StateDescriptor

__all__ = ["State"]


class State:
    """Common base: the descriptor, the store and the namespace of one registered state."""

    __slots__ = ("_descriptor", "_codec", "_store", "_backend", "_namespace", "_accepts", "_exact_types", "_ttl",
                 "_return_expired", "_update_on_read")

    def __init__(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any, backend: Any) -> None:
        self._descriptor = descriptor
        self._codec = codec
        self._store = store
        self._backend = backend
        self._namespace = VOID_NAMESPACE
        accepts = descriptor.type_info.accepts
        self._accepts = None if descriptor.type_info.accepts_any else accepts
        self._exact_types = descriptor.type_info.exact_types
        ttl = descriptor.ttl_config
        self._ttl = ttl.ttl_millis if ttl else 0
        self._return_expired = bool(ttl and ttl.return_expired)
        self._update_on_read = bool(ttl and ttl.update_on_read)

    @property
    def name(self) -> str:
        return self._descriptor.name

    def set_current_namespace(self, namespace: Any) -> None:
        """Scope further access to ``namespace`` (windows use this; keyed process functions never need it)."""
        self._namespace = VOID_NAMESPACE if namespace is None else encode_key(namespace)

    def _check(self, value: Any) -> None:
        accepts = self._accepts
        if accepts is not None and value is not None and type(value) not in self._exact_types and not accepts(value):
            self._codec.check_write(value)

    def _now(self) -> int:
        return self._backend.ttl_clock()

    def clear(self) -> None:
        """Remove the current key's state."""
        self._store.delete(self._namespace)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._descriptor.name!r})"
