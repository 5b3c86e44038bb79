"""Unsigned LEB128 varints, one at a time and many at once (numpy), byte-identical either way.

A Spark key group's state row carries every timer of the group as three varints each (see :mod:`timers.codec`);
with hundreds of thousands of timers per batch, encoding them one Python call at a time was a visible share of a
batch, so whole columns are encoded with numpy.
"""

from __future__ import annotations

import numpy as np

from keyedstate.errors import SerializationError

__all__ = ["put_varint", "get_varint", "encode_varints", "decode_varints"]

_SEVEN = np.uint64(7)
_LOW_BITS = np.uint64(0x7F)
_MAX_VARINT_BYTES = 10  # 64 bits in 7-bit groups


def put_varint(out: bytearray, value: int) -> None:
    """Append ``value`` (``0 <= value < 2**64``) to ``out``: low 7-bit group first, high bit set on all but the last."""
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def get_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``data[pos]`` and the position after it; IndexError when ``data`` ends inside it."""
    result = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise SerializationError("corrupt timer blob: a varint is longer than 10 bytes")


def encode_varints(values: np.ndarray) -> bytes:
    """The varints of every value of ``values`` (unsigned, < 2**64), concatenated in order.

    Equal to ``put_varint`` over the values one by one.
    """
    values = np.ascontiguousarray(values, dtype=np.uint64).ravel()
    if not values.size:
        return b""
    lengths = np.ones(values.size, dtype=np.int64)
    rest = values >> _SEVEN
    for _ in range(_MAX_VARINT_BYTES - 1):
        more = rest != 0
        if not more.any():
            break
        lengths += more
        rest >>= _SEVEN
    starts = np.cumsum(lengths) - lengths
    out = np.empty(int(starts[-1] + lengths[-1]), dtype=np.uint8)
    for index in range(int(lengths.max())):
        has_byte = lengths > index
        group = (values[has_byte] >> np.uint64(7 * index)) & _LOW_BITS
        continued = (lengths[has_byte] > index + 1).astype(np.uint64) << _SEVEN
        out[starts[has_byte] + index] = (group | continued).astype(np.uint8)
    return out.tobytes()


def decode_varints(data: bytes, pos: int, count: int) -> tuple[np.ndarray, int]:
    """The ``count`` varints starting at ``data[pos]`` (uint64) and the position after them.

    Raises IndexError when ``data`` ends before them, SerializationError on a varint longer than 10 bytes.
    """
    if count == 0:
        return np.empty(0, dtype=np.uint64), pos
    tail = np.frombuffer(data, dtype=np.uint8, offset=pos)
    ends = np.flatnonzero(tail < 0x80)[:count]  # a varint ends at its first byte without the high bit
    if len(ends) < count:
        raise IndexError("varints run past the end of the data")
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    longest = int(lengths.max())
    if longest > _MAX_VARINT_BYTES:
        raise SerializationError("corrupt timer blob: a varint is longer than 10 bytes")
    values = np.zeros(count, dtype=np.uint64)
    for index in range(longest):
        has_byte = lengths > index
        group = (tail[starts[has_byte] + index] & 0x7F).astype(np.uint64)
        values[has_byte] |= group << np.uint64(7 * index)
    return values, pos + int(ends[-1]) + 1
