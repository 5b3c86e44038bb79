"""A compact, versioned file of keyed-state records in the shared layout (used by heap snapshots).

Layout (all integers big-endian)::

    b"KSREC" | version u8 | codec u8 (0 none, 1 zstd) | uncompressed size u64 | payload
    payload = section* end
    section = kind u8 (1 state, 2 raw column) | name length u16 | name utf-8 | record count u64 | record*
    record  = key length u32 | value length u32 | key | value
    end     = kind u8 0

Keys and values are exactly what the RocksDB backend stores, so either backend restores a file written by the other.
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator

import pyarrow as pa

from keyedstate.errors import SnapshotCorruptedError

__all__ = ["STATE_SECTION", "RAW_COLUMN_SECTION", "encode_record_file", "decode_record_file"]

MAGIC = b"KSREC"
VERSION = 1
STATE_SECTION = 1
RAW_COLUMN_SECTION = 2
_END = 0
_NO_CODEC, _ZSTD = 0, 1
_header = struct.Struct(">5sBBQ")
_section = struct.Struct(">BH")
_count = struct.Struct(">Q")
_lengths = struct.Struct(">II")


def encode_record_file(sections: Iterable[tuple[int, str, Iterable[tuple[bytes, bytes]]]], compress: bool = True) -> bytes:
    out = bytearray()
    pack_lengths = _lengths.pack
    for kind, name, records in sections:
        encoded_name = name.encode("utf-8")
        out += _section.pack(kind, len(encoded_name)) + encoded_name
        count_at = len(out)
        out += _count.pack(0)
        count = 0
        for key, value in records:
            out += pack_lengths(len(key), len(value))
            out += key
            out += value
            count += 1
        _count.pack_into(out, count_at, count)
    out.append(_END)
    raw_size = len(out)
    if compress and pa.Codec.is_available("zstd"):
        payload = pa.Codec("zstd", compression_level=1).compress(out, asbytes=True)
        return _header.pack(MAGIC, VERSION, _ZSTD, raw_size) + payload
    return _header.pack(MAGIC, VERSION, _NO_CODEC, raw_size) + bytes(out)


def decode_record_file(data: bytes, where: str) -> Iterator[tuple[int, str, list[tuple[bytes, bytes]]]]:
    """Yield (kind, name, records) per section. ``where`` names the file in errors."""
    try:
        magic, version, codec, raw_size = _header.unpack_from(data)
    except struct.error as error:
        raise SnapshotCorruptedError(f"{where} is not a keyedstate record file ({error})") from error
    if magic != MAGIC:
        raise SnapshotCorruptedError(f"{where} is not a keyedstate record file (magic {magic!r})")
    if version > VERSION:
        raise SnapshotCorruptedError(f"{where} has record format version {version}, newer than supported ({VERSION})")
    body = memoryview(data)[_header.size:]
    if codec == _ZSTD:
        body = pa.Codec("zstd").decompress(body, decompressed_size=raw_size, asbytes=True)
    elif codec == _NO_CODEC:
        body = bytes(body)
    else:
        raise SnapshotCorruptedError(f"{where} uses unknown compression codec {codec}")
    try:
        yield from _sections(body)
    except (struct.error, IndexError, UnicodeDecodeError) as error:
        raise SnapshotCorruptedError(f"{where} is truncated or damaged ({error})") from error


def _sections(body: bytes) -> Iterator[tuple[int, str, list[tuple[bytes, bytes]]]]:
    position = 0
    unpack_lengths = _lengths.unpack_from
    while True:
        kind = body[position]
        if kind == _END:
            return
        _, name_length = _section.unpack_from(body, position)
        position += _section.size
        name = body[position:position + name_length].decode("utf-8")
        position += name_length
        (count,) = _count.unpack_from(body, position)
        position += _count.size
        records = []
        for _ in range(count):
            key_length, value_length = unpack_lengths(body, position)
            position += 8
            key_end = position + key_length
            value_end = key_end + value_length
            records.append((body[position:key_end], body[key_end:value_end]))
            position = value_end
        if position > len(body):
            raise IndexError("a record runs past the end of the file")
        yield kind, name, records
