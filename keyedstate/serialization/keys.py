"""Deterministic, order-preserving, self-delimiting encoding of keys.

Keys (the user's grouping key, MapState user keys, namespaces) must encode to the same bytes in every process and
every run, so Python's salted ``hash()`` and pickle are never used here. Each element starts with a type tag (never
0xff) and is self-delimiting: an encoded key *followed by another element* (the namespace, a map key) is never a
prefix of a different key followed by anything, so ``key + namespace`` prefix scans are exact. (A bare key can be a
byte prefix of another: ``b"a"`` and ``b"a\x00"``; stored keys always have a namespace after the key.)
Within one type the byte order equals the value order (ints numerically, strings by code point, tuples element-wise),
which is what range and prefix scans in RocksDB rely on.

Equal Python values of *different* types encode differently: ``1``, ``1.0`` and ``True`` are three distinct keys.
"""

from __future__ import annotations

import datetime as _dt
import struct
from typing import Any, Iterable

from keyedstate.errors import UnsupportedKeyTypeError

__all__ = ["encode_key", "encode_keys_with_prefix", "decode_key", "SUPPORTED_KEY_TYPES"]

SUPPORTED_KEY_TYPES = ("None, bool, int, float (not NaN), str, bytes, datetime.date, datetime.datetime and tuples of "
                       "these")

_NONE = 0x00
_BYTES = 0x01
_STR = 0x02
_TUPLE = 0x05
_NEG_BIG_INT = 0x14
_INT = 0x15
_POS_BIG_INT = 0x16
_FLOAT = 0x21
_FALSE = 0x26
_TRUE = 0x27
_DATE = 0x30
_NAIVE_DATETIME = 0x31
_AWARE_DATETIME = 0x32
_TUPLE_END = 0x00
# Inside a tuple a None element must not look like the tuple terminator.
_NONE_IN_TUPLE = b"\x00\xff"

_INT64_OFFSET = 1 << 63
_pack_u64 = struct.Struct(">Q").pack
_unpack_u64 = struct.Struct(">Q").unpack_from
_pack_f64 = struct.Struct(">d").pack
_unpack_f64 = struct.Struct(">d").unpack_from
_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_DATE = _dt.date(1970, 1, 1)

try:  # numpy comes with pandas; keys from pandas frames are often numpy scalars
    import numpy as _np

    _NUMPY_GENERIC: tuple[type[Any], ...] = (_np.generic,)
except ImportError:  # pragma: no cover - numpy is a transitive dependency
    _NUMPY_GENERIC = ()

# A subclass of one of these (IntEnum, NamedTuple, str enums) encodes as its base value; bool before int.
_BASE_TYPES: tuple[type[Any], ...] = (bool, int, str, float, bytes, tuple)


def _escape(raw: bytes) -> bytes:
    return raw.replace(b"\x00", b"\x00\xff") + b"\x00"


def _encode_int(value: int) -> bytes:
    if -_INT64_OFFSET <= value < _INT64_OFFSET:
        return b"\x15" + _pack_u64(value + _INT64_OFFSET)
    if value > 0:
        magnitude = value.to_bytes((value.bit_length() + 7) // 8, "big")
        return bytes((_POS_BIG_INT, len(magnitude))) + magnitude
    magnitude = (-value).to_bytes(((-value).bit_length() + 7) // 8, "big")
    inverted = bytes(255 - b for b in magnitude)
    return bytes((_NEG_BIG_INT, 255 - len(magnitude))) + inverted


def _encode_float(value: float) -> bytes:
    if value != value:
        raise UnsupportedKeyTypeError(
            "NaN cannot be used as a key: NaN is not equal to itself, so state stored under it could never be found "
            "again. Replace NaN keys (for example with None) before keying the stream."
        )
    if value == 0.0:
        value = 0.0  # -0.0 == 0.0, so both must encode alike
    bits = _unpack_u64(_pack_f64(value))[0]
    bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits & (1 << 63) else bits | (1 << 63)
    return b"\x21" + _pack_u64(bits)


def _encode_element(value: Any, out: list[bytes], in_tuple: bool) -> None:
    kind = type(value)
    if kind is str:
        out.append(b"\x02" + _escape(value.encode("utf-8")))
    elif kind is int:
        out.append(_encode_int(value))
    elif value is None:
        out.append(_NONE_IN_TUPLE if in_tuple else b"\x00")
    elif kind is bool:
        out.append(b"\x27" if value else b"\x26")
    elif kind is tuple:
        out.append(b"\x05")
        for element in value:
            _encode_element(element, out, True)
        out.append(b"\x00")
    elif kind is bytes:
        out.append(b"\x01" + _escape(value))
    elif kind is float:
        out.append(_encode_float(value))
    elif isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            micros = (value - _EPOCH) // _dt.timedelta(microseconds=1)
            out.append(bytes((_NAIVE_DATETIME,)) + _encode_int(micros))
        else:
            micros = (value - _EPOCH_UTC) // _dt.timedelta(microseconds=1)
            out.append(bytes((_AWARE_DATETIME,)) + _encode_int(micros))
    elif isinstance(value, _dt.date):
        out.append(bytes((_DATE,)) + _encode_int((value - _EPOCH_DATE).days))
    elif _NUMPY_GENERIC and isinstance(value, _NUMPY_GENERIC):
        _encode_element(value.item(), out, in_tuple)
    elif isinstance(value, _BASE_TYPES):
        # Subclasses (IntEnum, NamedTuple, str enums) encode as their base value.
        for base in _BASE_TYPES:
            if isinstance(value, base):
                _encode_element(base(value) if base is not tuple else tuple(value), out, in_tuple)
                return
    else:
        raise UnsupportedKeyTypeError(
            f"a key of type {kind.__qualname__} cannot be used: keys must encode to the same bytes in every process, "
            f"which is supported for {SUPPORTED_KEY_TYPES}. Convert the key (for example to a str or a tuple) "
            f"in your key selector."
        )


def encode_key(value: Any) -> bytes:
    """Encode a key to bytes: deterministic, order-preserving within a type and self-delimiting."""
    kind = type(value)
    if kind is str:
        return b"\x02" + value.encode("utf-8").replace(b"\x00", b"\x00\xff") + b"\x00"
    if kind is int and -_INT64_OFFSET <= value < _INT64_OFFSET:
        return b"\x15" + _pack_u64(value + _INT64_OFFSET)
    out: list[bytes] = []
    _encode_element(value, out, False)
    return b"".join(out)


def encode_keys_with_prefix(prefix: bytes, keys: Iterable[Any]) -> list[bytes]:
    """``[prefix + encode_key(key) for key in keys]``, with str keys (the common case) encoded inline: a batch's
    keys are encoded once each, and the call per key would cost as much as the encoding."""
    str_start = prefix + b"\x02"
    join = b"".join
    return [
        join((str_start, key.encode("utf-8").replace(b"\x00", b"\x00\xff"), b"\x00")) if type(key) is str
        else prefix + encode_key(key)
        for key in keys
    ]


def _read_escaped(data: bytes, pos: int) -> tuple[bytes, int]:
    parts = []
    while True:
        end = data.index(b"\x00", pos)
        parts.append(data[pos:end])
        if end + 1 < len(data) and data[end + 1] == 0xFF:
            parts.append(b"\x00")
            pos = end + 2
            continue
        return b"".join(parts), end + 1


def _decode_int(data: bytes, pos: int) -> tuple[int, int]:
    tag = data[pos]
    if tag == _INT:
        return _unpack_u64(data, pos + 1)[0] - _INT64_OFFSET, pos + 9
    if tag == _POS_BIG_INT:
        length = data[pos + 1]
        return int.from_bytes(data[pos + 2 : pos + 2 + length], "big"), pos + 2 + length
    if tag == _NEG_BIG_INT:
        length = 255 - data[pos + 1]
        magnitude = bytes(255 - b for b in data[pos + 2 : pos + 2 + length])
        return -int.from_bytes(magnitude, "big"), pos + 2 + length
    raise UnsupportedKeyTypeError(f"corrupt key encoding: expected an integer tag at byte {pos}, found {tag:#x}")


def _decode_element(data: bytes, pos: int, in_tuple: bool) -> tuple[Any, int]:
    tag = data[pos]
    if tag == _STR:
        raw, pos = _read_escaped(data, pos + 1)
        return raw.decode("utf-8"), pos
    if tag in (_INT, _POS_BIG_INT, _NEG_BIG_INT):
        return _decode_int(data, pos)
    if tag == _NONE:
        return None, pos + (2 if in_tuple else 1)
    if tag == _TRUE:
        return True, pos + 1
    if tag == _FALSE:
        return False, pos + 1
    if tag == _BYTES:
        return _read_escaped(data, pos + 1)
    if tag == _TUPLE:
        pos += 1
        elements = []
        while not (data[pos] == _TUPLE_END and (pos + 1 >= len(data) or data[pos + 1] != 0xFF)):
            element, pos = _decode_element(data, pos, True)
            elements.append(element)
        return tuple(elements), pos + 1
    if tag == _FLOAT:
        bits = _unpack_u64(data, pos + 1)[0]
        bits = bits ^ (1 << 63) if bits & (1 << 63) else bits ^ 0xFFFFFFFFFFFFFFFF
        return _unpack_f64(_pack_u64(bits))[0], pos + 9
    if tag == _DATE:
        days, pos = _decode_int(data, pos + 1)
        return _EPOCH_DATE + _dt.timedelta(days=days), pos
    if tag == _NAIVE_DATETIME:
        micros, pos = _decode_int(data, pos + 1)
        return _EPOCH + _dt.timedelta(microseconds=micros), pos
    if tag == _AWARE_DATETIME:
        micros, pos = _decode_int(data, pos + 1)
        return _EPOCH_UTC + _dt.timedelta(microseconds=micros), pos
    raise UnsupportedKeyTypeError(f"corrupt key encoding: unknown type tag {tag:#x} at byte {pos}")


def decode_key(data: bytes, offset: int = 0) -> tuple[Any, int]:
    """Decode one key starting at ``offset``; return the key and the offset just past it."""
    return _decode_element(data, offset, False)
