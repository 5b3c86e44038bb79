"""The state row of one key group: the commit record Spark's state store snapshots every micro-batch.

Row schema (fixed, so Spark's state schema check never trips over keyedstate upgrades)::

    format        int     1 = the row carries the group's whole state (state_backend="heap");
                          2 = the state lives in RocksDB and durable files; the row carries their version record
    key_groups    int     num_key_groups the query was started with; a restart with another number is refused
    state         binary  format 1: every state's records of the group in the shared stored-key layout (msgpack);
                          format 2: the version record (keyedstate.state.rocksdb.versions.VersionRecord)
    timers        binary  format 1: the group's timers (timers' versioned key-group encoding); format 2: empty
    base_snapshot long    format 2: the batch of the base snapshot the version builds on (null before the first)
    tag           string  format 2: the version's tag (unique per call that wrote it); format 1: the id of the
                          bootstrap the query started from (keyed_process(initial_state=...)), null without one
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import msgpack

from keyedstate.errors import SnapshotCorruptedError

__all__ = ["STATE_ROW_SCHEMA_DDL", "STATE_ROW_FORMAT_FULL", "STATE_ROW_FORMAT_ROCKSDB", "StateRow",
           "encode_state_payload", "decode_state_payload"]

STATE_ROW_FORMAT_FULL = 1
STATE_ROW_FORMAT_ROCKSDB = 2
STATE_ROW_SCHEMA_DDL = (
    "format INT, key_groups INT, state BINARY, timers BINARY, base_snapshot BIGINT, tag STRING"
)
_PAYLOAD_VERSION = 1


@dataclass(frozen=True)
class StateRow:
    format: int
    key_groups: int
    state: bytes
    timers: bytes
    base_snapshot: Optional[int] = None
    tag: Optional[str] = None

    def to_tuple(self) -> tuple[Any, ...]:
        return (self.format, self.key_groups, self.state, self.timers, self.base_snapshot, self.tag)

    @classmethod
    def from_row(cls, row: Any) -> "StateRow":
        return cls(int(row[0]), int(row[1]), bytes(row[2] or b""), bytes(row[3] or b""), row[4], row[5])


def encode_state_payload(states: list[tuple[dict[str, Any], list[tuple[bytes, bytes]]]]) -> bytes:
    """``[(state metadata json, [(stored key, entry bytes), ...]), ...]`` -> bytes."""
    body = [[metadata, [item for pair in records for item in pair]] for metadata, records in states]
    return msgpack.packb([_PAYLOAD_VERSION, body], use_bin_type=True)


def decode_state_payload(data: bytes) -> list[tuple[dict[str, Any], list[tuple[bytes, bytes]]]]:
    if not data:
        return []
    try:
        version, body = msgpack.unpackb(data, raw=False)
    except Exception as error:  # msgpack raises several unrelated types for garbage
        raise SnapshotCorruptedError(f"the keyed state in a Spark state row cannot be decoded ({error})") from error
    if version != _PAYLOAD_VERSION:
        raise SnapshotCorruptedError(
            f"a Spark state row holds keyed state payload version {version}, which this keyedstate version does not "
            f"read (it reads {_PAYLOAD_VERSION}); the checkpoint was written by another keyedstate version"
        )
    return [(metadata, list(zip(flat[0::2], flat[1::2]))) for metadata, flat in body]
