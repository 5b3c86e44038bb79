"""Byte encodings of timers.

Two encodings live here:

**Raw-column records** (what snapshots and the RocksDB column family hold), one record per timer::

    key   = key group (2 bytes, big-endian)
            + timestamp + 2**63 (8 bytes, big-endian: the sign-flipped long, so byte order == numeric order)
            + encoded key + encoded namespace
    value = format version (1 byte, = 1) + length of the encoded key (4 bytes, big-endian)

Byte order of the keys is therefore (key group, timestamp, key, namespace): a forward scan of one key group yields its
timers in firing order, and rescaling filters records by their key-group prefix like any keyed state.

**Key-group blobs** (what the Spark integration keeps in a key group's state row): all timers of one key group in
both time domains, compact and versioned::

    version (1 byte, = 1)
    varint key group
    varint number of distinct keys,       then per key:       varint length + encoded key
    varint number of distinct namespaces, then per namespace: varint length + encoded namespace
    for the event-time domain, then the processing-time domain:
        varint number of timers, then per timer in ascending order:
        varint timestamp delta (to the previous timer of the domain; the first is absolute),
        varint key index, varint namespace index

Keys and namespaces are stored once however many timers they have; sorted timestamps make the deltas small.
"""

from __future__ import annotations

import struct
from functools import partial
from itertools import chain, repeat
from operator import itemgetter, ne
from typing import Iterable

import numpy as np

from keyedstate.errors import SerializationError
from keyedstate.fastpath import fastpath
from keyedstate.state.base.layout import KEY_GROUP_PREFIX_BYTES, key_group_prefix
from timers.timer import InternalTimer, TimerTuple
from timers.varint import decode_varints, encode_varints, get_varint, put_varint

__all__ = [
    "RECORD_FORMAT_VERSION",
    "BLOB_FORMAT_VERSION",
    "encode_record",
    "encode_records",
    "encode_record_key",
    "decode_record",
    "key_group_start",
    "key_group_end",
    "encode_key_group_blob",
    "decode_key_group_blob",
]

RECORD_FORMAT_VERSION = 1
BLOB_FORMAT_VERSION = 1

_SIGN_FLIP = 1 << 63
_u64 = struct.Struct(">Q")
_value = struct.Struct(">BI")
_TIMESTAMP_END = KEY_GROUP_PREFIX_BYTES + 8


def encode_record(timer: TimerTuple) -> tuple[bytes, bytes]:
    """The raw-column (key, value) of ``timer``."""
    prefix = timer[1]
    return (
        prefix[:KEY_GROUP_PREFIX_BYTES] + _u64.pack(timer[0] + _SIGN_FLIP) + prefix[KEY_GROUP_PREFIX_BYTES:] + timer[2],
        _value.pack(RECORD_FORMAT_VERSION, len(prefix) - KEY_GROUP_PREFIX_BYTES),
    )


def encode_records(timers: Iterable[TimerTuple]) -> list[tuple[bytes, bytes]]:
    """:func:`encode_record` of every timer, with its work inline: writing a key group's timers in one batch calls
    it once instead of once per timer. The compiled fast path's ``encode_timer_records`` is its declared twin (it
    hands :func:`encode_record` any timer it does not encode itself)."""
    if fastpath is not None:
        return fastpath.encode_timer_records(timers, RECORD_FORMAT_VERSION, encode_record)
    return _encode_records(timers)


def _encode_records(timers: Iterable[TimerTuple]) -> list[tuple[bytes, bytes]]:
    pack, flip, split = _u64.pack, _SIGN_FLIP, KEY_GROUP_PREFIX_BYTES
    values: dict[int, bytes] = {}  # the value depends only on the key's length
    records = []
    for timestamp, prefix, namespace, _ in timers:
        value = values.get(len(prefix))
        if value is None:
            value = values[len(prefix)] = _value.pack(RECORD_FORMAT_VERSION, len(prefix) - split)
        records.append((prefix[:split] + pack(timestamp + flip) + prefix[split:] + namespace, value))
    return records


def encode_record_key(timer: TimerTuple) -> bytes:
    """Only the raw-column key of ``timer`` (deletes need no value)."""
    prefix = timer[1]
    return (prefix[:KEY_GROUP_PREFIX_BYTES] + _u64.pack(timer[0] + _SIGN_FLIP) + prefix[KEY_GROUP_PREFIX_BYTES:]
            + timer[2])


def decode_record(key: bytes, value: bytes, prefixes: dict[bytes, bytes] | None = None) -> InternalTimer:
    """The timer of a raw-column record. ``prefixes`` (optional) interns key prefixes to share memory."""
    if len(value) != _value.size or value[0] != RECORD_FORMAT_VERSION:
        raise SerializationError(
            f"timer record {key.hex()} has an unknown format (value {value.hex()}); it was written by a newer "
            f"keyedstate (record format {RECORD_FORMAT_VERSION} is supported) or is corrupt"
        )
    key_length = _value.unpack(value)[1]
    split = _TIMESTAMP_END + key_length
    prefix = key[:KEY_GROUP_PREFIX_BYTES] + key[_TIMESTAMP_END:split]
    if prefixes is not None:
        prefix = prefixes.setdefault(prefix, prefix)
    return InternalTimer(
        (_u64.unpack_from(key, KEY_GROUP_PREFIX_BYTES)[0] - _SIGN_FLIP, prefix, key[split:], (key[0] << 8) | key[1])
    )


def key_group_start(key_group: int) -> bytes:
    """The first raw-column key of ``key_group``."""
    return key_group_prefix(key_group)


def key_group_end(key_group: int) -> bytes:
    """The first raw-column key after ``key_group`` (key groups are < 2**15, so ``key_group + 1`` fits)."""
    return key_group_prefix(key_group + 1)


_timestamp_of = itemgetter(0)
_new_timer = partial(tuple.__new__, InternalTimer)  # InternalTimer(fields) through type.__call__ costs ~2x as much
_prefix_of = itemgetter(1)
_namespace_of = itemgetter(2)
_key_group_of = itemgetter(3)


def encode_key_group_blob(
    key_group: int, event_timers: Iterable[TimerTuple], processing_timers: Iterable[TimerTuple]
) -> bytes:
    """All timers of one key group as one blob (see the module docstring). Timers need not be sorted."""
    domains = [sorted(event_timers), sorted(processing_timers)]
    for timers in domains:
        if any(map(ne, map(_key_group_of, timers), repeat(key_group))):
            stranger = next(timer for timer in timers if timer[3] != key_group)
            raise SerializationError(f"timer {stranger!r} does not belong to key group {key_group}")
    # first appearance order over both domains: the index order of the tables
    keys = list(dict.fromkeys(map(_prefix_of, chain(*domains))))
    namespaces = list(dict.fromkeys(map(_namespace_of, chain(*domains))))
    out = bytearray((BLOB_FORMAT_VERSION,))
    put_varint(out, key_group)
    _put_table(out, list(map(_without_key_group, keys)))
    _put_table(out, namespaces)
    key_index = dict(zip(keys, range(len(keys))))
    namespace_index = dict(zip(namespaces, range(len(namespaces))))
    for timers in domains:
        put_varint(out, len(timers))
        if timers:
            timestamps = np.fromiter(map(_timestamp_of, timers), dtype=np.uint64, count=len(timers))
            columns = np.empty((len(timers), 3), dtype=np.uint64)
            columns[:, 0] = np.diff(timestamps, prepend=np.uint64(0))
            columns[:, 1] = np.fromiter(map(key_index.__getitem__, map(_prefix_of, timers)), dtype=np.uint64,
                                        count=len(timers))
            columns[:, 2] = np.fromiter(map(namespace_index.__getitem__, map(_namespace_of, timers)),
                                        dtype=np.uint64, count=len(timers))
            out += encode_varints(columns)  # per timer: timestamp delta, key index, namespace index
    return bytes(out)


_without_key_group = itemgetter(slice(KEY_GROUP_PREFIX_BYTES, None))
_ONE_BYTE_VARINTS = [bytes((length,)) for length in range(0x80)]


def _put_table(out: bytearray, entries: list[bytes]) -> None:
    """``varint count`` then ``varint length + bytes`` per entry."""
    put_varint(out, len(entries))
    lengths = list(map(len, entries))
    if lengths and max(lengths) < 0x80:
        # a table holds one entry per key of the key group: interleave one-byte lengths and entries in C
        parts = [b""] * (2 * len(entries))
        parts[0::2] = map(_ONE_BYTE_VARINTS.__getitem__, lengths)
        parts[1::2] = entries
        out += b"".join(parts)
        return
    for entry in entries:
        put_varint(out, len(entry))
        out += entry


def decode_key_group_blob(data: bytes) -> tuple[int, list[InternalTimer], list[InternalTimer]]:
    """``(key_group, event-time timers, processing-time timers)`` of a blob, each list ascending."""
    if not data:
        raise SerializationError("empty timer blob")
    if data[0] != BLOB_FORMAT_VERSION:
        raise SerializationError(
            f"timer blob has format version {data[0]}, this keyedstate reads version {BLOB_FORMAT_VERSION}; it was "
            f"written by a newer keyedstate or is corrupt"
        )
    try:
        key_group, pos = get_varint(data, 1)
        group_prefix = key_group_prefix(key_group)
        tables: list[list[bytes]] = []
        for is_key in (True, False):
            count, pos = get_varint(data, pos)
            table = []
            for _ in range(count):
                length, pos = get_varint(data, pos)
                raw = data[pos : pos + length]
                if len(raw) != length:
                    raise IndexError
                pos += length
                table.append(group_prefix + raw if is_key else raw)
            tables.append(table)
        keys, namespaces = tables
        domains: list[list[InternalTimer]] = []
        for _ in range(2):
            count, pos = get_varint(data, pos)
            columns, pos = decode_varints(data, pos, 3 * count)  # per timer: timestamp delta, key, namespace index
            columns = columns.reshape(count, 3)
            timestamps = np.cumsum(columns[:, 0]).tolist()
            domains.append(list(map(_new_timer, zip(
                timestamps, map(keys.__getitem__, columns[:, 1].tolist()),
                map(namespaces.__getitem__, columns[:, 2].tolist()), repeat(key_group, count)))))
    except (IndexError, struct.error) as error:
        raise SerializationError(f"corrupt or truncated timer blob ({len(data)} bytes)") from error
    if pos != len(data):
        raise SerializationError(f"corrupt timer blob: {len(data) - pos} unexpected trailing bytes")
    return key_group, domains[0], domains[1]

