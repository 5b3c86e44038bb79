"""Key and value serialization.

Keys use a deterministic, order-preserving encoding (:func:`encode_key`); values use a versioned msgpack codec with
a pickle fallback (:class:`DefaultValueCodec`) unless a descriptor names its own :class:`TypeSerializer`.
"""

from typing import Any, Protocol, runtime_checkable

from keyedstate.serialization.keys import SUPPORTED_KEY_TYPES, decode_key, encode_key, encode_keys_with_prefix
from keyedstate.serialization.values import DEFAULT_CODEC, DefaultValueCodec, PickleValueCodec

__all__ = [
    "TypeSerializer",
    "encode_key",
    "encode_keys_with_prefix",
    "decode_key",
    "SUPPORTED_KEY_TYPES",
    "DefaultValueCodec",
    "PickleValueCodec",
    "DEFAULT_CODEC",
]


@runtime_checkable
class TypeSerializer(Protocol):
    """Turns state values into bytes and back. Must be deterministic and safe to call from any thread."""

    def serialize(self, value: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...
