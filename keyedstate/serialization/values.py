"""The default value codec: versioned msgpack for common Python values, pickle only as a fallback.

Every encoded value starts with one format byte, so the format can evolve without breaking stored state:
``0x01`` msgpack (with extension types for tuple, set, frozenset, datetime, date, timedelta, Decimal and big ints),
``0x02`` pickle of the whole value (used when msgpack cannot represent it, e.g. a value nested in a custom class),
``0x03`` a 64-bit signed int and ``0x04`` a float, as 8 big-endian bytes (counters and sums are the most common state
values, and a fixed-width struct is several times cheaper than msgpack's generic path).
Keys never go through this codec (see :mod:`keyedstate.serialization.keys`).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import pickle
import struct
from functools import partial
from typing import Any

import msgpack

from keyedstate.errors import SerializationError

__all__ = ["DefaultValueCodec", "PickleValueCodec", "DEFAULT_CODEC"]

_MSGPACK = b"\x01"
_PICKLE = b"\x02"
_INT64 = 3
_FLOAT64 = 4
_scalar_struct = struct.Struct(">Bq")
_float_struct = struct.Struct(">Bd")
_pack_scalar = _scalar_struct.pack
_pack_float = _float_struct.pack
_unpack_int_from = struct.Struct(">q").unpack_from
_unpack_float_from = struct.Struct(">d").unpack_from
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_EXT_TUPLE = 1
_EXT_SET = 2
_EXT_FROZENSET = 3
_EXT_DATETIME = 4
_EXT_DATE = 5
_EXT_TIMEDELTA = 6
_EXT_DECIMAL = 7
_EXT_BIG_INT = 8
_EXT_PICKLE = 127

_datetime_struct = struct.Struct(">qi")  # microseconds since epoch, utc offset in seconds (or a sentinel)
_NAIVE = -(2**31)
_EPOCH = _dt.datetime(1970, 1, 1)


def _describe_unpicklable(value: Any, error: Exception) -> SerializationError:
    return SerializationError(
        f"a value of type {type(value).__qualname__} cannot be serialized ({error}). State values must be "
        f"msgpack-able builtins or picklable objects; make the class picklable (module-level, no open handles or "
        f"lambdas) or give the state descriptor an explicit serializer."
    )


def _default(value: Any) -> msgpack.ExtType:
    kind = type(value)
    if kind is tuple:
        return msgpack.ExtType(_EXT_TUPLE, _packb(list(value)))
    if kind is set:
        return msgpack.ExtType(_EXT_SET, _packb(list(value)))
    if kind is frozenset:
        return msgpack.ExtType(_EXT_FROZENSET, _packb(list(value)))
    if kind is _dt.datetime:
        offset = value.utcoffset()
        naive = value.replace(tzinfo=None)
        micros = (naive - _EPOCH) // _dt.timedelta(microseconds=1)
        if offset is None or value.tzinfo is not _dt.timezone.utc and not isinstance(value.tzinfo, _dt.timezone):
            if offset is not None:  # zoneinfo and friends: keep the exact tzinfo object
                return msgpack.ExtType(_EXT_PICKLE, _pickle(value))
            return msgpack.ExtType(_EXT_DATETIME, _datetime_struct.pack(micros, _NAIVE))
        return msgpack.ExtType(_EXT_DATETIME, _datetime_struct.pack(micros, int(offset.total_seconds())))
    if kind is _dt.date:
        return msgpack.ExtType(_EXT_DATE, struct.pack(">i", value.toordinal()))
    if kind is _dt.timedelta:
        return msgpack.ExtType(_EXT_TIMEDELTA, struct.pack(">q", value // _dt.timedelta(microseconds=1)))
    if kind is decimal.Decimal:
        return msgpack.ExtType(_EXT_DECIMAL, str(value).encode("ascii"))
    if kind is int:  # only reached for ints outside msgpack's 64-bit range
        return msgpack.ExtType(_EXT_BIG_INT, str(value).encode("ascii"))
    return msgpack.ExtType(_EXT_PICKLE, _pickle(value))


def _pickle(value: Any) -> bytes:
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # pickle raises many unrelated types (TypeError, AttributeError, PicklingError)
        raise _describe_unpicklable(value, error) from error


def _packb(value: Any) -> bytes:
    return msgpack.packb(value, default=_default, use_bin_type=True, strict_types=True)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_TUPLE:
        return tuple(_unpackb(data))
    if code == _EXT_SET:
        return set(_unpackb(data))
    if code == _EXT_FROZENSET:
        return frozenset(_unpackb(data))
    if code == _EXT_DATETIME:
        micros, offset = _datetime_struct.unpack(data)
        naive = _EPOCH + _dt.timedelta(microseconds=micros)
        if offset == _NAIVE:
            return naive
        return naive.replace(tzinfo=_dt.timezone(_dt.timedelta(seconds=offset)) if offset else _dt.timezone.utc)
    if code == _EXT_DATE:
        return _dt.date.fromordinal(struct.unpack(">i", data)[0])
    if code == _EXT_TIMEDELTA:
        return _dt.timedelta(microseconds=struct.unpack(">q", data)[0])
    if code == _EXT_DECIMAL:
        return decimal.Decimal(data.decode("ascii"))
    if code == _EXT_BIG_INT:
        return int(data.decode("ascii"))
    if code == _EXT_PICKLE:
        return pickle.loads(data)
    raise SerializationError(f"stored value uses unknown msgpack extension type {code}; it was written by a newer "
                             f"keyedstate version")


_msgpack_unpackb = msgpack.unpackb


def _unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False, use_list=True)


class DefaultValueCodec:
    """Versioned msgpack codec with a pickle fallback. Stateless and safe to share."""

    name = "default-v1"

    def __init__(self) -> None:
        self._packer = msgpack.Packer(default=_default, use_bin_type=True, strict_types=True, autoreset=True)

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # msgpack's Packer cannot be pickled; a fresh one is the same codec. Functions shipped to Spark by value
        # carry codecs inside OutputTags and descriptors.
        return DefaultValueCodec, ()

    def serialize(self, value: Any) -> bytes:
        kind = type(value)
        if kind is int and _INT64_MIN <= value <= _INT64_MAX:
            return _pack_scalar(_INT64, value)
        if kind is float:
            return _pack_float(_FLOAT64, value)
        try:
            return _MSGPACK + self._packer.pack(value)
        except SerializationError:
            raise
        except (OverflowError, ValueError, TypeError):
            # msgpack gives up on exotic shapes (e.g. huge containers, subclasses inside ext payloads)
            return _PICKLE + _pickle(value)

    def deserialize(self, data: bytes) -> Any:
        # Hot path of every RocksDB read: index instead of slicing for the format byte, msgpack called directly.
        head = data[0] if data else -1
        if head == 3 and len(data) == 9:
            return _unpack_int_from(data, 1)[0]
        if head == 1:
            # raw=False and use_list=True are msgpack's defaults; passing them costs a keyword parse per call.
            return _msgpack_unpackb(data[1:], ext_hook=_ext_hook, strict_map_key=False)
        if head == 4 and len(data) == 9:
            return _unpack_float_from(data, 1)[0]
        if head == 2:
            return pickle.loads(data[1:])
        raise SerializationError(
            f"stored value starts with format byte {data[:1]!r}, which this keyedstate version does not know; "
            f"the state was written by a newer version or is corrupt"
        )


class PickleValueCodec:
    """Plain pickle (highest protocol): PyFlink's ``Types.PICKLED_BYTE_ARRAY()``."""

    name = "pickle"
    #: serialize() without the descriptive error, a C call (no Python frame): for hot and bulk paths, which redo a
    #: failed value through serialize()
    bulk_serialize = partial(pickle.dumps, protocol=pickle.HIGHEST_PROTOCOL)

    def serialize(self, value: Any) -> bytes:
        return _pickle(value)

    def deserialize(self, data: bytes) -> Any:
        return pickle.loads(data)


DEFAULT_CODEC = DefaultValueCodec()
