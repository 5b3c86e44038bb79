"""Checkpoints: the listener protocol (the Kafka offset committer) and durable state storage with verified files."""

from typing import TYPE_CHECKING

from keyedstate.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from keyedstate.checkpoint.listener import CheckpointListener
    from keyedstate.checkpoint.manifest import CHECKSUM_ALGORITHM, FORMAT_VERSION, FileEntry, SnapshotManifest
    from keyedstate.checkpoint.storage import CheckpointStorage

# Lazy: the Kafka connector's processes need the listener protocol, not the storage (and the state it imports).
__getattr__, __dir__ = lazy_exports(__name__, {
    "CheckpointListener": "keyedstate.checkpoint.listener",
    "CheckpointStorage": "keyedstate.checkpoint.storage",
    **dict.fromkeys(["SnapshotManifest", "FileEntry", "CHECKSUM_ALGORITHM", "FORMAT_VERSION"],
                    "keyedstate.checkpoint.manifest"),
})

__all__ = [
    "CheckpointListener",
    "CheckpointStorage",
    "SnapshotManifest",
    "FileEntry",
    "CHECKSUM_ALGORITHM",
    "FORMAT_VERSION",
]
