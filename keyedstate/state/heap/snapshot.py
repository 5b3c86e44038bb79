"""Heap backend snapshots: one record file (:mod:`keyedstate.checkpoint.record_file`) per checkpoint and scope.

Records are in the shared layout, so a heap snapshot restores into RocksDB and a RocksDB snapshot into the heap.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from typing import Any, Sequence

from keyedstate.checkpoint.manifest import SnapshotManifest, manifest_for_backend
from keyedstate.checkpoint.record_file import RAW_COLUMN_SECTION, STATE_SECTION, decode_record_file, encode_record_file
from keyedstate.checkpoint.restore import assign_key_groups, merged_state_metadata
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, SnapshotCorruptedError
from keyedstate.state.heap.backend import _remove_expired

__all__ = ["snapshot_heap_backend", "restore_heap_backend", "read_record_snapshot", "RECORD_FILE_NAME"]

logger = logging.getLogger("keyedstate.state.heap")

RECORD_FILE_NAME = "state.ksrec"


def snapshot_heap_backend(backend: Any, checkpoint_id: int) -> SnapshotManifest:
    storage = backend.checkpoint_storage
    if storage is None:
        raise ConfigurationError("the heap backend has no checkpoint_storage; pass checkpoint_storage=CheckpointStorage"
                                 "(...) to snapshot it")
    scope = CheckpointStorage.check_scope(backend.scope)
    backend._run_pre_snapshot_hooks()  # timers flush into their raw column here
    _cleanup_for_snapshot(backend)
    sections = [(STATE_SECTION, metadata.name, backend.iter_stored_records(metadata.name))
                for metadata in sorted(backend.state_metadata(), key=lambda m: m.name)]
    sections += [(RAW_COLUMN_SECTION, name, backend.iter_raw_column_records(name))
                 for name in backend.raw_column_names()]
    relative = f"{storage.checkpoint_dir(checkpoint_id, scope)}/{RECORD_FILE_NAME}"
    entry = storage.write_bytes(relative, encode_record_file(sections), RECORD_FILE_NAME)
    manifest = manifest_for_backend(backend, checkpoint_id, [entry], entry.size)
    storage.write_manifest(manifest)
    storage.apply_retention(scope)
    return manifest


def _cleanup_for_snapshot(backend: Any) -> None:
    """Drop expired entries of TTL states that ask for cleanup in background or at full snapshots."""
    now = backend.ttl_clock()
    for registered in backend._states.values():
        ttl = registered.descriptor.ttl_config
        if ttl is not None and (ttl.cleanup_in_background or ttl.cleanup_full_snapshot):
            _remove_expired(registered.descriptor.kind, registered.store.data, now - ttl.ttl_millis)


def read_record_snapshot(manifest: SnapshotManifest) -> list[tuple[int, str, list[tuple[bytes, bytes]]]]:
    """Every section of a heap snapshot, after verifying the file's checksum."""
    storage = manifest.storage
    if storage is None:
        raise ConfigurationError(f"{manifest.describe()} has no checkpoint storage to read its files from")
    sections = []
    for entry in manifest.files:
        data = storage.read_verified(entry, manifest)
        sections.extend(decode_record_file(data, f"file {entry.path} of {manifest.describe()}"))
    return sections


def restore_heap_backend(backend: Any, manifests: Sequence[SnapshotManifest]) -> None:
    """Load the owned key groups of ``manifests`` (heap or RocksDB snapshots). Every file is verified and read
    before the first record is loaded, so a corrupt snapshot leaves the backend untouched."""
    plan = assign_key_groups(manifests, backend.key_group_range, backend.max_parallelism)
    metadata = merged_state_metadata(backend, manifests)
    loaded: list[tuple[int, str, list[tuple[bytes, bytes]]]] = []
    for manifest, ranges in plan:
        if manifest.backend_kind == "rocksdb":
            loaded.extend(_read_rocksdb_snapshot(manifest, ranges))
        elif manifest.backend_kind == backend.backend_kind:
            from keyedstate.state.rocksdb.staging import records_in_ranges

            for kind, name, records in read_record_snapshot(manifest):
                loaded.append((kind, name, records_in_ranges(records, ranges, manifest.key_group_range)))
        else:
            raise SnapshotCorruptedError(f"{manifest.describe()} has unknown backend kind {manifest.backend_kind!r}")
    for kind, name, records in loaded:
        if kind == STATE_SECTION:
            if name not in metadata:
                raise SnapshotCorruptedError(f"a snapshot holds records of state {name!r} but no metadata for it")
            backend.load_stored_records(metadata[name], records)
        elif kind == RAW_COLUMN_SECTION:
            backend.load_raw_column_records(name, records)
    for name, state in metadata.items():  # states without records in the owned key groups are still known
        backend._restored_metadata.setdefault(name, state)


def _read_rocksdb_snapshot(manifest: SnapshotManifest, ranges: Sequence[Any]) -> list[tuple[int, str, list]]:
    from keyedstate.state.rocksdb.db import RAW_CF_PREFIX, STATE_CF_PREFIX
    from keyedstate.state.rocksdb.staging import StagedSnapshot, stage_snapshot

    directory = tempfile.mkdtemp(prefix="keyedstate-restore-")
    try:
        stage_snapshot(manifest, directory)
        sections = []
        with StagedSnapshot(directory) as staged:
            for family in staged.family_names:
                records = list(staged.records(family, ranges))
                if family.startswith(STATE_CF_PREFIX):
                    sections.append((STATE_SECTION, family[len(STATE_CF_PREFIX):], records))
                elif family.startswith(RAW_CF_PREFIX):
                    sections.append((RAW_COLUMN_SECTION, family[len(RAW_CF_PREFIX):], records))
        return sections
    finally:
        shutil.rmtree(directory, ignore_errors=True)
