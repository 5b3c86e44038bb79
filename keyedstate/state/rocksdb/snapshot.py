"""Incremental RocksDB snapshots: a RocksDB checkpoint, of which only SST files no retained snapshot holds are
uploaded; MANIFEST/OPTIONS/CURRENT (small, change every time) are uploaded for every snapshot."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from typing import Any

from keyedstate.checkpoint.manifest import FileEntry, SnapshotManifest, manifest_for_backend
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError

__all__ = ["snapshot_rocksdb_backend", "sha256_file"]

logger = logging.getLogger("keyedstate.state.rocksdb")


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(4 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def snapshot_rocksdb_backend(backend: Any, checkpoint_id: int) -> SnapshotManifest:
    storage = backend.checkpoint_storage
    if storage is None:
        raise ConfigurationError(
            f"RocksDB backend at {backend.path} has no checkpoint_storage; pass "
            f"checkpoint_storage=CheckpointStorage(...) to snapshot it"
        )
    scope = CheckpointStorage.check_scope(backend.scope)
    backend._run_pre_snapshot_hooks()  # timers flush into their raw column here
    backend._cleanup_expired(only_snapshot_cleanup=True)  # expired entries never reach the snapshot
    # SSTs already stored by a retained snapshot of this scope, by (name, size, checksum): a restored database can
    # reuse file numbers, so a name alone never proves two files equal.
    stored: dict[tuple[str, int, str], FileEntry] = {}
    stored_names: set[tuple[str, int]] = set()
    for manifest in storage.retained_manifests(scope):
        for entry in manifest.files:
            if entry.shared:
                stored[entry.identity] = entry
                stored_names.add((entry.name, entry.size))
    local = f"{backend.path}.snapshot-{int(checkpoint_id)}-{uuid.uuid4().hex[:8]}"  # same filesystem: hard links
    backend._database.checkpoint(local)
    files: list[FileEntry] = []
    uploaded = 0
    try:
        for name in sorted(os.listdir(local)):
            path = os.path.join(local, name)
            size = os.path.getsize(path)
            if name.endswith(".sst"):
                entry = _stored_copy(backend, stored, stored_names, name, size, path)
                if entry is None:
                    stem = name[: -len(".sst")]
                    checksum = backend.sst_checksums.get((name, size)) or sha256_file(path)
                    relative = f"{storage.shared_dir(scope)}/{stem}-{checksum[:16]}.sst"
                    entry = storage.upload_file(path, relative, name, shared=True, checksum=checksum)
                    uploaded += entry.size
                backend.sst_checksums[(name, size)] = entry.checksum
            else:
                relative = f"{storage.checkpoint_dir(checkpoint_id, scope)}/{name}"
                entry = storage.upload_file(path, relative, name)
                uploaded += entry.size
            files.append(entry)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    manifest = manifest_for_backend(backend, checkpoint_id, files, uploaded)
    storage.write_manifest(manifest)
    storage.apply_retention(scope)
    logger.info("RocksDB snapshot %d of %s: uploaded %d of %d bytes (%d files)", checkpoint_id, scope, uploaded,
                manifest.total_bytes, len(files))
    return manifest


def _stored_copy(backend: Any, stored: dict, stored_names: set, name: str, size: int, path: str) -> FileEntry | None:
    """The already stored entry of this local SST, or None. Hashes the file only when name and size match one."""
    if (name, size) not in stored_names:
        return None
    checksum = backend.sst_checksums.get((name, size))
    if checksum is None:
        checksum = sha256_file(path)
        backend.sst_checksums[(name, size)] = checksum
    return stored.get((name, size, checksum))
