"""Checkpoints: the listener protocol (the Kafka offset committer) and durable state storage with verified files."""

from keyedstate.checkpoint.listener import CheckpointListener
from keyedstate.checkpoint.manifest import CHECKSUM_ALGORITHM, FORMAT_VERSION, FileEntry, SnapshotManifest
from keyedstate.checkpoint.storage import CheckpointStorage

__all__ = [
    "CheckpointListener",
    "CheckpointStorage",
    "SnapshotManifest",
    "FileEntry",
    "CHECKSUM_ALGORITHM",
    "FORMAT_VERSION",
]
