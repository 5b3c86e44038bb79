"""Checkpoints: the listener protocol, checkpoint storage, snapshot manifests and restore with fallback."""

from keyedstate.checkpoint.listener import CheckpointListener
from keyedstate.checkpoint.manifest import (
    CHECKSUM_ALGORITHM,
    FORMAT_VERSION,
    FileEntry,
    SnapshotManifest,
    manifest_for_backend,
)
from keyedstate.checkpoint.record_file import decode_record_file, encode_record_file
from keyedstate.checkpoint.restore import assign_key_groups, covering_manifests, restore_latest
from keyedstate.checkpoint.storage import DEFAULT_RETAINED_CHECKPOINTS, MANIFEST_NAME, CheckpointStorage

__all__ = [
    "CheckpointListener",
    "CheckpointStorage",
    "SnapshotManifest",
    "FileEntry",
    "manifest_for_backend",
    "restore_latest",
    "covering_manifests",
    "assign_key_groups",
    "encode_record_file",
    "decode_record_file",
    "CHECKSUM_ALGORITHM",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "DEFAULT_RETAINED_CHECKPOINTS",
]
