"""Savepoints, step 1 (in the executors): one source key group's committed state, as raw records moving to their
key groups of the target query.

A key group's state is decoded without the function's descriptors: records stay in the shared stored-key layout
(:mod:`keyedstate.state.base.layout`: key group + encoded key + namespace (+ map key or list sequence) -> entry, TTL
timestamp included) and timers stay raw-column records (:mod:`timers.codec`: key group + timestamp + encoded key +
namespace). Each record's key is decoded once to compute its key group in the target query, with the same function
the harness uses for Spark's ``pmod(xxhash64(key columns), num_key_groups)`` and the key columns' recorded Spark types;
the key's key group in the source is computed the same way and must be the one it is stored in, so a key type that
does not match the keys fails here instead of misplacing state.

Output rows: ``key_group INT`` (the target's) and ``chunk BINARY``: at most :data:`CHUNK_RECORDS` records of that key
group with the 2-byte key-group prefix cut off (msgpack, :func:`encode_chunk`). Memory: one source key group's rows
(heap) or one chunk (RocksDB, iterated from a temporary database restored from the version files).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

import msgpack

from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.errors import ConfigurationError, SnapshotCorruptedError
from keyedstate.keygroups import KEY_GROUP_PREFIX_BYTES, key_group_assigner
from keyedstate.serialization import decode_key
from keyedstate.spark.state_reader import restored_version
from keyedstate.state.key_groups.initial_state import storage_at
from keyedstate.state.key_groups.row_format import STATE_ROW_FORMAT_ROCKSDB, StateRow, decode_state_payload
from keyedstate.state.rocksdb.versions import VersionRecord, Where
from timers.codec import decode_key_group_blob, encode_record
from timers.service import DEFAULT_SERVICE_NAME

__all__ = ["savepoint_work_dir", "CHUNK_RECORDS", "CHUNK_SCHEMA", "SourceDecoder", "encode_chunk", "decode_chunk",
           "EVENT_TIMERS", "PROCESSING_TIMERS"]

CHUNK_RECORDS = 20_000
CHUNK_SCHEMA = "key_group INT, chunk BINARY"
EVENT_TIMERS = f"_timer_state/event_{DEFAULT_SERVICE_NAME}"
PROCESSING_TIMERS = f"_timer_state/processing_{DEFAULT_SERVICE_NAME}"
_TIMER_KEY_START = KEY_GROUP_PREFIX_BYTES + 8  # a timer record's key: key group, timestamp, then the encoded key
_CHUNK_FORMAT = 1


def encode_chunk(states: Mapping[str, tuple[dict, list[bytes]]], raw: Mapping[str, list[bytes]]) -> bytes:
    """``states``: name -> (metadata JSON, flat [suffix, entry, ...]); ``raw``: column -> flat [suffix, value, ...]."""
    return msgpack.packb([_CHUNK_FORMAT, [[metadata, flat] for metadata, flat in states.values()],
                          [[name, flat] for name, flat in raw.items()]], use_bin_type=True)


def decode_chunk(data: bytes) -> tuple[list[tuple[dict, list[bytes]]], list[tuple[str, list[bytes]]]]:
    version, states, raw = msgpack.unpackb(data, raw=False)
    if version != _CHUNK_FORMAT:
        raise SnapshotCorruptedError(f"a savepoint chunk has format {version}, not {_CHUNK_FORMAT}")
    return [(metadata, flat) for metadata, flat in states], [(name, flat) for name, flat in raw]


class _Router:
    """Which target key group each record's key goes to (checked against the source key group it is stored in)."""

    def __init__(self, key_types: tuple[str, ...], source_groups: Optional[int], target_groups: int) -> None:
        self.assign_target = key_group_assigner(target_groups, key_types)
        self.assign_source = key_group_assigner(source_groups, key_types) if source_groups else None
        self.key_types = key_types
        self._last: Optional[bytes] = None
        self._last_group = 0

    def target(self, stored_key: bytes, start: int, source_group: int) -> int:
        last = self._last
        # encoded keys are self-delimiting (prefix-free): a record that starts with the last key's encoding is its
        if last is not None and stored_key.startswith(last, start):
            return self._last_group
        key, end = decode_key(stored_key, start)
        if self.assign_source is not None and self.assign_source(key) != source_group:
            raise ConfigurationError(
                f"the key {key!r} is stored in key group {source_group}, but its key columns' types "
                f"({', '.join(self.key_types)}) put it in key group {self.assign_source(key)}; the savepoint would "
                f"misplace its state. Pass key_schema with the key columns' Spark types as keyed_process saw them")
        self._last = stored_key[start:end]
        self._last_group = self.assign_target(key)
        return self._last_group


class _Chunks:
    """Records buffered per target key group; full chunks go out as rows."""

    def __init__(self) -> None:
        self.states: dict[int, dict[str, tuple[dict, list[bytes]]]] = {}
        self.raw: dict[int, dict[str, list[bytes]]] = {}
        self.counts: dict[int, int] = {}
        self.ready: list[tuple[int, bytes]] = []

    def add_state(self, group: int, metadata: dict, stored_key: bytes, entry: bytes) -> None:
        flat = self.states.setdefault(group, {}).setdefault(metadata["name"], (metadata, []))[1]
        flat += (stored_key[KEY_GROUP_PREFIX_BYTES:], entry)
        self._count(group)

    def add_raw(self, group: int, column: str, key: bytes, value: bytes) -> None:
        self.raw.setdefault(group, {}).setdefault(column, []).extend((key[KEY_GROUP_PREFIX_BYTES:], value))
        self._count(group)

    def _count(self, group: int) -> None:
        count = self.counts[group] = self.counts.get(group, 0) + 1
        if count >= CHUNK_RECORDS:
            self.flush(group)

    def flush(self, group: int) -> None:
        self.ready.append((group, encode_chunk(self.states.pop(group, {}), self.raw.pop(group, {}))))
        self.counts.pop(group, None)

    def flush_all(self) -> None:
        for group in list(self.counts):
            self.flush(group)

    def take(self) -> list[tuple[int, bytes]]:
        ready, self.ready = self.ready, []
        return ready


@dataclass(frozen=True)
class SourceDecoder:
    """``mapInPandas`` function: source key groups in, chunks of records for the target key groups out.

    ``source``: ``"rows"`` (the checkpoint's state rows: ``format, key_groups, state, timers, base_snapshot, tag``)
    or ``"files"`` (``key_group, entry``: a savepoint's or bootstrap's row file, read from ``location``).
    ``location``: where RocksDB-format rows' version files are (None: where each row says they were written).
    ``live_states``: each state the query held at the batch, by name, with its incarnation (None: copy every state).
    Entries of a state dropped since, or of an earlier incarnation left in key groups not written since the drop,
    are not copied: the query itself would never read them."""

    source: str
    key_types: tuple[str, ...]
    source_groups: Optional[int]
    target_groups: int
    location: Optional[str]
    options: Optional[StorageOptions]
    local_dir: Optional[str]
    live_states: Optional[Mapping[str, int]] = None

    def _live(self, metadata: Mapping[str, Any]) -> bool:
        return self.live_states is None or self.live_states.get(metadata["name"]) == metadata.get("incarnation", 0)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        router = _Router(self.key_types, self.source_groups, self.target_groups)
        chunks = _Chunks()
        for batch in batches:
            for row in batch.itertuples(index=False):
                state_row = self._state_row(row)
                if state_row is not None:
                    self._decode(state_row, router, chunks)
                    yield from _frames(pd, chunks.take())
        chunks.flush_all()
        yield from _frames(pd, chunks.take())

    def _state_row(self, row: Any) -> Optional[StateRow]:
        if self.source == "rows":
            if row[0] is None or row[0] != row[0]:  # a removed state row (null; NaN in pandas)
                return None
            return StateRow.from_row(row)
        assert self.location is not None  # a "files" source is always read from its location
        key_group, entry = int(row[0]), FileEntry.from_json(json.loads(row[1]))
        where = Where(f"key group {key_group}'s row of the savepoint at {self.location}")
        data = storage_at(self.location, self.options).read_verified(entry, where)
        try:
            return StateRow(*msgpack.unpackb(data, raw=False))
        except Exception as error:  # msgpack raises several unrelated types for garbage
            raise SnapshotCorruptedError(f"{entry.path} in {self.location} cannot be decoded ({error})") from error

    def _decode(self, row: StateRow, router: _Router, chunks: _Chunks) -> None:
        if row.format == STATE_ROW_FORMAT_ROCKSDB:
            self._decode_version(VersionRecord.from_bytes(row.state), row.key_groups, router, chunks)
            return
        for metadata, records in decode_state_payload(row.state):
            if not self._live(metadata):
                continue
            for stored_key, entry in records:
                source_group = (stored_key[0] << 8) | stored_key[1]
                chunks.add_state(router.target(stored_key, KEY_GROUP_PREFIX_BYTES, source_group), metadata,
                                 stored_key, entry)
        if row.timers:
            blob_group, event_timers, processing_timers = decode_key_group_blob(row.timers)
            for column, timers in ((EVENT_TIMERS, event_timers), (PROCESSING_TIMERS, processing_timers)):
                for timer in timers:
                    key, value = encode_record(timer)
                    chunks.add_raw(router.target(key, _TIMER_KEY_START, blob_group), column, key, value)

    def _decode_version(self, record: VersionRecord, source_groups: int, router: _Router, chunks: _Chunks) -> None:
        with restored_version(record, source_groups, self.location, self.options,
                              savepoint_work_dir(self.local_dir)) as restored:
            if restored is None:
                return
            key_group, backend = restored
            metadata = {m.name: m.to_json() for m in backend.state_metadata()}
            for name in backend.stored_state_names():
                if name in metadata and self._live(metadata[name]):
                    for stored_key, entry in backend.iter_stored_records(name):
                        chunks.add_state(router.target(stored_key, KEY_GROUP_PREFIX_BYTES, key_group), metadata[name],
                                         stored_key, entry)
            for column in backend.raw_column_names():
                for key, value in backend.iter_raw_column_records(column):
                    chunks.add_raw(router.target(key, _TIMER_KEY_START, key_group), column, key, value)


def savepoint_work_dir(configured: Optional[str]) -> Optional[str]:
    """Temporary databases go to ``configured``, else Spark's local directory (else the system's temp dir)."""
    directory = configured or os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None
    if directory:
        os.makedirs(directory, exist_ok=True)
    return directory


def _frames(pd: Any, ready: list[tuple[int, bytes]]) -> Iterator[Any]:
    import numpy as np

    if ready:
        yield pd.DataFrame({"key_group": np.array([group for group, _ in ready], dtype=np.int32),
                            "chunk": [chunk for _, chunk in ready]})
