"""Read the keyed state of a keyed_process query back from its checkpoint (for tests, debugging, audits).

Gets the key-group rows from Spark's state store (:func:`keyedstate.spark_compat.read_state_rows`: the state data
source on Spark 4.0+, Spark's state store classes on 3.5), then
decodes every key's state and timers: from the row itself in row mode, and in RocksDB mode from the version the
row names (its base snapshot and changelogs, restored into a temporary database and verified like any restore).
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.redaction import without_credentials
from keyedstate.serialization import DEFAULT_CODEC, PickleValueCodec, decode_key
from keyedstate.spark_compat import read_state_rows
from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.base.layout import KEY_GROUP_PREFIX_BYTES
from keyedstate.state.descriptors import StateDescriptor
from keyedstate.state.key_groups.row_format import STATE_ROW_FORMAT_ROCKSDB, StateRow, decode_state_payload
from keyedstate.state.rocksdb.versions import KeyGroupVersions, VersionRecord
from timers import decode_key_group_blob
from timers.codec import decode_record

__all__ = ["read_keyed_state", "decode_state_row", "stored_records", "restored_version"]

_PICKLE = PickleValueCodec()


def _deserializer(metadata: StateMetadata, descriptors: dict[str, StateDescriptor]) -> Any:
    descriptor = descriptors.get(metadata.name)
    if descriptor is not None:
        return descriptor.type_info.serializer.deserialize
    return _PICKLE.deserialize if "PICKLED_BYTE_ARRAY" in metadata.signature else DEFAULT_CODEC.deserialize


def decode_state_row(row: StateRow, descriptors: Sequence[StateDescriptor] = (),
                     state_storage: Optional[str] = None,
                     state_storage_options: Optional[Mapping[str, Any]] = None) -> dict[Any, dict[str, Any]]:
    """``{key: {state name: value, "__timers__": [(domain, timestamp), ...]}}`` of one key group's row.

    Values are plain Python values (list state as a list, map state as a dict); TTL timestamps are dropped. A
    RocksDB-mode row's files are read from the storage the row names, or from ``state_storage`` (the directory
    holding the ``kg-NNNNN`` directories) when they were moved.
    """
    states, timers = stored_records(row, state_storage, state_storage_options)
    return _assemble(states, timers, descriptors)


StoredStates = list[tuple[StateMetadata, list[tuple[bytes, bytes]]]]
StoredTimers = list[tuple[str, Any]]


def stored_records(row: StateRow, state_storage: Optional[str] = None,
                   state_storage_options: Optional[Mapping[str, Any]] = None) -> tuple[StoredStates, StoredTimers]:
    """One key group's records as stored, undecoded: ``([(state metadata, [(stored key, entry), ...]), ...],
    [(domain, InternalTimer), ...])``; a RocksDB-mode row's version is restored as for :func:`decode_state_row`."""
    timers: StoredTimers = []
    if row.format == STATE_ROW_FORMAT_ROCKSDB:
        with restored_version(VersionRecord.from_bytes(row.state), row.key_groups, state_storage,
                              state_storage_options) as restored:
            if restored is None:
                return [], []
            _, backend = restored
            for name in backend.raw_column_names():
                domain = "event_time" if name.startswith("_timer_state/event_") else "processing_time"
                timers += [(domain, decode_record(k, v)) for k, v in backend.iter_raw_column_records(name)]
            return backend.export_records(), timers
    states = [(StateMetadata.from_json(metadata), records) for metadata, records in decode_state_payload(row.state)]
    if row.timers:
        _, event_timers, processing_timers = decode_key_group_blob(row.timers)
        timers = [("event_time", t) for t in event_timers] + [("processing_time", t) for t in processing_timers]
    return states, timers


def _assemble(states: Iterable[tuple[StateMetadata, Iterable[tuple[bytes, bytes]]]], timers: Iterable[tuple[str, Any]],
              descriptors: Sequence[StateDescriptor]) -> dict[Any, dict[str, Any]]:
    by_name = {d.name: d for d in descriptors}
    result: dict[Any, dict[str, Any]] = {}
    for metadata, records in states:
        deserialize = _deserializer(metadata, by_name)
        for stored_key, entry in records:
            key, offset = decode_key(stored_key, KEY_GROUP_PREFIX_BYTES)
            _, offset = decode_key(stored_key, offset)  # namespace
            value = deserialize(entry[8:] if metadata.has_ttl else entry)
            states_of_key = result.setdefault(key, {})
            if metadata.kind == "list":
                states_of_key.setdefault(metadata.name, []).append(value)
            elif metadata.kind == "map":
                user_key, _ = decode_key(stored_key, offset)
                states_of_key.setdefault(metadata.name, {})[user_key] = value
            else:
                states_of_key[metadata.name] = value
    for domain, timer in timers:
        result.setdefault(timer.key, {}).setdefault("__timers__", []).append((domain, timer.timestamp))
    for states_of_key in result.values():
        if "__timers__" in states_of_key:
            states_of_key["__timers__"].sort()
    return result


@contextmanager
def restored_version(record: VersionRecord, num_key_groups: int, location: Optional[str], options: Any,
                     work_dir: Optional[str] = None) -> Iterator[Optional[tuple[int, Any]]]:
    """The key group of a RocksDB-mode version and a temporary database holding it (restored from ``location``, else
    from where the record says it was written, and its changelogs replayed); None for a version with no files."""
    from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions

    first = record.base or (record.changelogs[0] if record.changelogs else None)
    if first is None:
        yield None
        return
    key_group = int(first.path.split("/", 1)[0][len("kg-"):])
    storage = CheckpointStorage(location or without_credentials(record.location), options=options)
    with tempfile.TemporaryDirectory(prefix="keyedstate-restore-", dir=work_dir) as directory:
        path = os.path.join(directory, "db")
        changelogs = KeyGroupVersions(storage, key_group, num_key_groups).restore(record, path)
        backend = RocksDBKeyedStateBackend(path, num_key_groups=num_key_groups,
                                           options=RocksDBOptions(reuse_existing=True))
        try:
            for changelog in changelogs:
                backend.replay(changelog)
            yield key_group, backend
        finally:
            backend.close()


def read_keyed_state(
    spark: Any,
    checkpoint_location: str,
    *,
    descriptors: Sequence[StateDescriptor] = (),
    batch_id: Optional[int] = None,
    operator_id: int = 0,
    state_storage: Optional[str] = None,
    state_storage_options: Optional[Mapping[str, Any]] = None,
) -> dict[Any, dict[str, Any]]:
    """Every key's state (and pending timers) of a keyed_process query as of ``batch_id`` (default: the last
    committed batch), collected into a dict on the driver: for tests and small state (``read_keyed_state_frame``
    reads any size). Pass the function's descriptors to decode values stored with custom serializers. RocksDB
    mode: the state files are read where the query wrote them; ``state_storage`` overrides that location (the
    ``<state_storage>/<query id>/<uid>`` directory) when they were moved; ``state_storage_options`` are
    keyed_process's (credentials and endpoint of ``s3://`` storage)."""
    result: dict[Any, dict[str, Any]] = {}
    for state_row in read_state_rows(spark, checkpoint_location, operator_id, batch_id):
        if state_row is None:
            continue
        result.update(decode_state_row(StateRow.from_row(state_row), descriptors, state_storage,
                                       state_storage_options))
    return result
