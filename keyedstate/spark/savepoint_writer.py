"""Savepoints, step 2 (in the executors): the chunks of one target key group become its row file, in the target
state backend's format, exactly as :func:`keyedstate.spark.bootstrap_keyed_state` writes one (the layout is in
:mod:`keyedstate.state.key_groups.initial_state`).

The input is partitioned and sorted by target key group, so a key group's chunks arrive one after another:

* ``state_backend="heap"``: the records are re-prefixed with the new key group and kept in memory until the key
  group ends; its row (format 1) carries the state payload and the timers' key-group blob.
* ``state_backend="rocksdb"``: each chunk is written into a temporary RocksDB database as it arrives (memory: one
  chunk); at the end the database is stored below the savepoint as one full base snapshot (``kg-NNNNN/``), and the
  row (format 2) names it.

A state whose recorded metadata differs between source key groups (its type was widened in place) is written with
the metadata every other one is readable as; kinds or TTL settings that differ fail.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import key_group_prefix
from keyedstate.spark.savepoint_records import EVENT_TIMERS, PROCESSING_TIMERS, decode_chunk, savepoint_work_dir
from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.base.evolution import reads_as_is
from keyedstate.state.base.kinds import HEAP
from keyedstate.state.key_groups.initial_state import encode_row, storage_at
from keyedstate.state.key_groups.row_format import STATE_ROW_FORMAT_FULL, StateRow, encode_state_payload
from keyedstate.state.key_groups.versioned import save_version, version_row
from keyedstate.state.rocksdb.changelog import ChangeLog
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy
from timers.codec import decode_record, encode_key_group_blob

__all__ = ["RESULT_SCHEMA", "TargetWriter"]

RESULT_SCHEMA = "key_group INT, entry STRING, records BIGINT, timers BIGINT"


def _widest(name: str, seen: dict[str, StateMetadata], metadata: StateMetadata) -> None:
    """Keep in ``seen`` the metadata of state ``name`` every version met so far is readable as."""
    known = seen.get(name)
    if known is None or known == metadata:
        seen[name] = metadata
        return
    for wider, narrower in ((known, metadata), (metadata, known)):
        if (narrower.kind == wider.kind and narrower.has_ttl == wider.has_ttl
                and reads_as_is(narrower.signature, wider.signature)):
            seen[name] = wider
            return
    raise ConfigurationError(
        f"state {name!r} was stored as {known.kind} state of type {known.signature} (TTL "
        f"{'on' if known.has_ttl else 'off'}) in some key groups and as {metadata.kind} state of type "
        f"{metadata.signature} (TTL {'on' if metadata.has_ttl else 'off'}) in others; a savepoint cannot merge them. "
        f"Move the state through read_keyed_state_frame and bootstrap_keyed_state")


class _HeapGroup:
    """One target key group's records in memory, until its row is written."""

    def __init__(self, key_group: int, num_key_groups: int) -> None:
        self.key_group = key_group
        self.num_key_groups = num_key_groups
        self.prefix = key_group_prefix(key_group)
        self.states: dict[str, list[tuple[bytes, bytes]]] = {}
        self.metadata: dict[str, StateMetadata] = {}
        self.timers: dict[str, list[Any]] = {EVENT_TIMERS: [], PROCESSING_TIMERS: []}

    def add(self, chunk: bytes) -> None:
        prefix = self.prefix
        states, raw = decode_chunk(chunk)
        for metadata, flat in states:
            parsed = StateMetadata.from_json(metadata)
            _widest(parsed.name, self.metadata, parsed)
            records = self.states.setdefault(parsed.name, [])
            records += zip([prefix + suffix for suffix in flat[0::2]], flat[1::2])
        for column, flat in raw:
            timers = self.timers.get(column)
            if timers is None:
                raise ConfigurationError(f"the source holds timers of the timer service column {column!r}, which "
                                         f"keyed_process does not have; a savepoint cannot carry them")
            timers += (decode_record(prefix + key, value) for key, value in zip(flat[0::2], flat[1::2]))

    def row(self, work: str) -> tuple[StateRow, int, int]:
        payload = encode_state_payload([(self.metadata[name].to_json(), records)
                                        for name, records in self.states.items()])
        event, processing = self.timers[EVENT_TIMERS], self.timers[PROCESSING_TIMERS]
        blob = encode_key_group_blob(self.key_group, event, processing) if event or processing else b""
        records = sum(map(len, self.states.values()))
        return StateRow(STATE_ROW_FORMAT_FULL, self.num_key_groups, payload, blob, None, None), records, \
            len(event) + len(processing)

    def close(self) -> None:
        pass


class _RocksDBGroup:
    """One target key group built in a temporary RocksDB database, stored as one base snapshot at the end."""

    def __init__(self, key_group: int, num_key_groups: int, path: str, options: Optional[StorageOptions],
                 local_dir: Optional[str]) -> None:
        from keyedstate.state.rocksdb import RocksDBKeyedStateBackend

        self.key_group = key_group
        self.num_key_groups = num_key_groups
        self.prefix = key_group_prefix(key_group)
        self.storage = storage_at(path, options)
        self.work = tempfile.mkdtemp(prefix=f"keyedstate-savepoint-kg{key_group}-",
                                     dir=savepoint_work_dir(local_dir))
        self.backend = RocksDBKeyedStateBackend(os.path.join(self.work, "db"), num_key_groups=num_key_groups)
        self.metadata: dict[str, StateMetadata] = {}
        self.records = 0
        self.timers = 0

    def add(self, chunk: bytes) -> None:
        prefix = self.prefix
        states, raw = decode_chunk(chunk)
        for metadata, flat in states:
            parsed = StateMetadata.from_json(metadata)
            _widest(parsed.name, self.metadata, parsed)
            records = list(zip([prefix + suffix for suffix in flat[0::2]], flat[1::2]))
            self.backend.load_stored_records(parsed, records)
            self.records += len(records)
        for column, flat in raw:
            records = list(zip([prefix + key for key in flat[0::2]], flat[1::2]))
            self.backend.raw_column(column).put_many(records)
            self.timers += len(records)

    def row(self, work: str) -> tuple[StateRow, int, int]:
        for metadata in self.metadata.values():
            self.backend.load_stored_records(metadata, [])  # the metadata the whole key group is read with
        versions = KeyGroupVersions(self.storage, self.key_group, self.num_key_groups)
        record, _ = save_version(self.backend, versions, None, ChangeLog(), 0, SnapshotPolicy(), 1,
                                 os.path.join(self.work, "base"), full_base=True)
        assert record is not None
        return StateRow(*version_row(self.num_key_groups, record)), self.records, self.timers

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            shutil.rmtree(self.work, ignore_errors=True)


@dataclass(frozen=True)
class TargetWriter:
    """``mapInPandas`` function over chunks partitioned and sorted by target key group: one result row per key
    group (its row file's :class:`~keyedstate.checkpoint.manifest.FileEntry` as JSON, records and timers)."""

    path: str
    options: Optional[StorageOptions]
    state_backend: str
    num_key_groups: int
    local_dir: Optional[str]

    def _group(self, key_group: int) -> Any:
        if self.state_backend == HEAP:
            return _HeapGroup(key_group, self.num_key_groups)
        return _RocksDBGroup(key_group, self.num_key_groups, self.path, self.options, self.local_dir)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        group: Any = None
        results: list[tuple[int, str, int, int]] = []
        try:
            for batch in batches:
                for key_group, chunk in zip(batch["key_group"].tolist(), batch["chunk"].tolist()):
                    if group is not None and group.key_group != key_group:
                        results.append(self._finish(group))
                        group = None
                    if group is None:
                        group = self._group(int(key_group))
                    group.add(chunk)
            if group is not None:
                results.append(self._finish(group))
                group = None
        finally:
            if group is not None:
                group.close()
        if results:
            yield pd.DataFrame.from_records(results, columns=["key_group", "entry", "records", "timers"])

    def _finish(self, group: Any) -> tuple[int, str, int, int]:
        try:
            row, records, timers = group.row(self.path)
            name = f"kg-{group.key_group:05d}-{uuid.uuid4().hex[:16]}.row"
            written = storage_at(self.path, self.options).write_bytes(f"rows/{name}", encode_row(row), name)
        finally:
            group.close()
        return group.key_group, json.dumps(written.to_json()), records, timers
