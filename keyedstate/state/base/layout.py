"""The byte layout of keyed state, shared by every backend and by snapshots.

Every stored key starts with the key group (2 bytes, big-endian, :func:`keyedstate.keygroups.key_group_prefix`) and
the encoded user key; that prefix is what rescaling and per-key-group scans use. After it come the encoded namespace
and, per state kind:

* value, reducing, aggregating: nothing more; the stored value is one entry.
* map: the encoded map key; one entry per map key.
* list: an 8-byte big-endian sequence number; one entry per element, so appends never rewrite the list.

An entry is the serialized value, preceded by an 8-byte big-endian last-access timestamp when the state has a TTL.
Heap snapshots use the same layout, so a snapshot of one backend restores into the other.
"""

from __future__ import annotations

import struct
from typing import Any

from keyedstate.errors import SerializationError, StateTypeMismatchError
from keyedstate.keygroups import KEY_GROUP_PREFIX_BYTES, key_group_prefix  # owned there; the first part of the layout
from keyedstate.serialization import encode_key
from keyedstate.state.descriptors import StateDescriptor

__all__ = [
    "KEY_GROUP_PREFIX_BYTES",
    "VOID_NAMESPACE",
    "LIST_SEQUENCE_BYTES",
    "key_group_prefix",
    "prefix_successor",
    "last_access_ms",
    "EntryCodec",
]

LIST_SEQUENCE_BYTES = 8
VOID_NAMESPACE = encode_key(None)

_timestamp_struct = struct.Struct(">q")
_sequence_struct = struct.Struct(">Q")

pack_sequence = _sequence_struct.pack
unpack_sequence = _sequence_struct.unpack_from


def last_access_ms(entry: bytes) -> int:
    """The last-access time a TTL state's stored entry starts with."""
    return _timestamp_struct.unpack_from(entry)[0]


def prefix_successor(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with ``prefix``."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        raise ValueError("a prefix of only 0xff bytes has no successor")
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


class EntryCodec:
    """Serializes one state's entries (value, or ``(value, last_access_ms)`` with TTL) and checks their type."""

    __slots__ = ("descriptor", "has_ttl", "_serialize", "_bulk_serialize", "_deserialize", "_check", "_name",
                 "_type_name")

    def __init__(self, descriptor: StateDescriptor) -> None:
        self.descriptor = descriptor
        self.has_ttl = descriptor.ttl_config is not None
        self._serialize = descriptor.type_info.serializer.serialize
        self._bulk_serialize = getattr(descriptor.type_info.serializer, "bulk_serialize", self._serialize)
        self._deserialize = descriptor.type_info.serializer.deserialize
        self._check = descriptor.type_info.check
        self._name = descriptor.name
        self._type_name = descriptor.type_info.name

    def check_write(self, value: Any) -> None:
        if not self._check(value):
            raise StateTypeMismatchError(
                f"state {self._name!r} is declared as {self._type_name} but was given a "
                f"{type(value).__qualname__} value ({_short(value)}); write a {self._type_name} value, or declare "
                f"the state with the type you store"
            )

    def check_read(self, value: Any) -> Any:
        if not self._check(value):
            raise StateTypeMismatchError(
                f"state {self._name!r} holds a {type(value).__qualname__} value but its descriptor now declares "
                f"{self._type_name}; the stored state was written with another type. Keep the old type, declare a "
                f"migration (descriptor.enable_state_migration), or register the new type under a new state name"
            )
        return value

    @property
    def raw_serialize(self) -> Any:
        """The type's own serialize function, without the state-name error wrapping: for bulk paths, which redo a
        failed batch through :meth:`serialize_entry` to report the failure with the state's name."""
        return self._bulk_serialize

    def serialize_value(self, value: Any) -> bytes:
        try:
            return self._serialize(value)
        except SerializationError as error:
            raise SerializationError(f"state {self._name!r}: {error}") from error.__cause__

    def deserialize_value(self, data: bytes) -> Any:
        try:
            value = self._deserialize(data)
        except SerializationError:
            raise
        except Exception as error:  # a user serializer or a corrupt payload
            raise SerializationError(f"state {self._name!r}: stored value cannot be decoded ({error})") from error
        return self.check_read(value)

    def serialize_entry(self, entry: Any) -> bytes:
        if self.has_ttl:
            value, last_access = entry
            return _timestamp_struct.pack(last_access) + self.serialize_value(value)
        return self.serialize_value(entry)

    def deserialize_entry(self, data: bytes) -> Any:
        if self.has_ttl:
            return self.deserialize_value(data[8:]), _timestamp_struct.unpack_from(data)[0]
        return self.deserialize_value(data)

    def serialize_map_key(self, user_key: Any) -> bytes:
        try:
            return encode_key(user_key)
        except SerializationError as error:
            raise type(error)(f"map state {self._name!r}: {error}") from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
