"""Restoring the RocksDB backend from snapshots.

Every file is downloaded into a fresh staging directory and verified before the local database is touched. One
RocksDB snapshot of exactly the backend's key groups becomes the database as is; otherwise (rescaling, several
snapshots, heap snapshots) the owned key-group ranges are copied into a new, empty database with range scans, so
state of key groups this backend does not own is never loaded.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from typing import Any, Sequence

from keyedstate.checkpoint.manifest import SnapshotManifest
from keyedstate.checkpoint.record_file import RAW_COLUMN_SECTION, STATE_SECTION
from keyedstate.checkpoint.restore import assign_key_groups, merged_state_metadata
from keyedstate.errors import SnapshotCorruptedError
from keyedstate.state.rocksdb.db import RAW_CF_PREFIX, STATE_CF_PREFIX
from keyedstate.state.rocksdb.staging import StagedSnapshot, records_in_ranges, stage_snapshot

__all__ = ["restore_rocksdb_backend"]

logger = logging.getLogger("keyedstate.state.rocksdb")

_COPY_BATCH = 10_000


def restore_rocksdb_backend(backend: Any, manifests: Sequence[SnapshotManifest]) -> None:
    plan = assign_key_groups(manifests, backend.key_group_range, backend.max_parallelism)
    metadata = merged_state_metadata(backend, manifests)
    staging = f"{backend.path}.restore-{uuid.uuid4().hex[:8]}"
    try:
        sources = _stage_all(plan, staging)  # raises SnapshotCorruptedError before the database is touched
        exact = (len(plan) == 1 and plan[0][0].backend_kind == "rocksdb"
                 and plan[0][0].key_group_range == backend.key_group_range)
        backend._close_database()
        shutil.rmtree(backend.path, ignore_errors=True)
        if exact:
            manifest, _, directory = sources[0]
            os.rename(directory, backend.path)
            backend._open_database(reuse_existing=True)
            # The downloaded SSTs are the stored ones: the next snapshot uploads none of them again.
            backend.sst_checksums = {(e.name, e.size): e.checksum for e in manifest.files if e.name.endswith(".sst")}
        else:
            backend._open_database(reuse_existing=False)
            for manifest, ranges, source in sources:
                _copy_owned(backend, manifest, ranges, source)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    backend._restored_metadata.update({name: m for name, m in metadata.items() if name not in backend._states})
    backend._write_metadata(list(metadata.values()))


def _stage_all(plan: list, staging: str) -> list[tuple[SnapshotManifest, list, Any]]:
    from keyedstate.state.heap.snapshot import read_record_snapshot

    sources = []
    for index, (manifest, ranges) in enumerate(plan):
        if manifest.backend_kind == "rocksdb":
            sources.append((manifest, ranges, stage_snapshot(manifest, os.path.join(staging, str(index)))))
        elif manifest.backend_kind == "heap":
            sources.append((manifest, ranges, read_record_snapshot(manifest)))
        else:
            raise SnapshotCorruptedError(f"{manifest.describe()} has unknown backend kind {manifest.backend_kind!r}")
    return sources


def _copy_owned(backend: Any, manifest: SnapshotManifest, ranges: list, source: Any) -> None:
    if manifest.backend_kind == "heap":
        for kind, name, records in source:
            prefix = STATE_CF_PREFIX if kind == STATE_SECTION else RAW_CF_PREFIX if kind == RAW_COLUMN_SECTION else None
            if prefix is not None:
                _write_records(backend, prefix + name, records_in_ranges(records, ranges, manifest.key_group_range))
        return
    with StagedSnapshot(source) as staged:
        for family in staged.family_names:
            if family.startswith((STATE_CF_PREFIX, RAW_CF_PREFIX)):
                _write_records(backend, family, staged.records(family, ranges))


def _write_records(backend: Any, family_name: str, records: Any) -> None:
    database = backend._database
    database.column_family(family_name)  # restored states keep their column family even when empty here
    handle = database.handles[family_name]
    batch = database.new_batch()
    for key, value in records:
        batch.put(key, value, handle)
        if len(batch) >= _COPY_BATCH:
            database.write(batch)
            batch = database.new_batch()
    if len(batch):
        database.write(batch)
