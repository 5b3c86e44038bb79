"""Stored files and base snapshot manifests, as versioned JSON.

A :class:`FileEntry` names one stored file with its size and sha256 checksum (``hashlib.sha256``, OpenSSL-backed:
~1-2 GB/s, no extra dependency). A :class:`SnapshotManifest` describes one base snapshot of a key group in RocksDB
mode (:mod:`keyedstate.state.rocksdb.versions`): every file of the RocksDB checkpoint, the state metadata needed to
check descriptors on restore, and how many bytes the snapshot uploaded versus referenced. It is written after every
file it lists, and the key group's committed row names it with its own checksum.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from keyedstate.errors import SnapshotCorruptedError
from keyedstate.keygroups import KeyGroupRange
from keyedstate.state.base.backend import StateMetadata

__all__ = ["FORMAT_VERSION", "CHECKSUM_ALGORITHM", "FileEntry", "SnapshotManifest"]

FORMAT_VERSION = 1
CHECKSUM_ALGORITHM = "sha256"


@dataclass(frozen=True)
class FileEntry:
    """One stored file: ``path`` relative to the storage root, ``name`` the file's name inside the snapshot (what
    RocksDB's MANIFEST calls it), and whether it lives in the scope's shared (incremental) directory."""

    path: str
    name: str
    size: int
    checksum: str
    shared: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "size": self.size, "checksum": self.checksum,
                "shared": self.shared}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "FileEntry":
        return cls(str(value["path"]), str(value["name"]), int(value["size"]), str(value["checksum"]),
                   bool(value.get("shared", False)))


@dataclass
class SnapshotManifest:
    checkpoint_id: int
    scope: str
    backend_kind: str
    key_group_range: KeyGroupRange
    num_key_groups: int
    states: list[StateMetadata]
    raw_columns: list[str]
    files: list[FileEntry]
    uploaded_bytes: int
    total_bytes: int
    created_at_ms: int
    format_version: int = FORMAT_VERSION
    checksum_algorithm: str = CHECKSUM_ALGORITHM

    def to_json(self) -> dict[str, Any]:
        body = {
            "format_version": self.format_version,
            "checkpoint_id": self.checkpoint_id,
            "scope": self.scope,
            "backend_kind": self.backend_kind,
            "key_group_range": self.key_group_range.to_json(),
            "num_key_groups": self.num_key_groups,
            "created_at_ms": self.created_at_ms,
            "states": [state.to_json() for state in self.states],
            "raw_columns": list(self.raw_columns),
            "checksum_algorithm": self.checksum_algorithm,
            "files": [entry.to_json() for entry in self.files],
            "uploaded_bytes": self.uploaded_bytes,
            "total_bytes": self.total_bytes,
        }
        body["manifest_checksum"] = _body_checksum(body)
        return body

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=1, sort_keys=True).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "SnapshotManifest":
        """Parse a manifest; ``where`` names it in errors. A damaged manifest raises SnapshotCorruptedError."""
        try:
            body = json.loads(data)
            expected = body.pop("manifest_checksum")
            if _body_checksum(body) != expected:
                raise ValueError("its own checksum does not match its content")
            version = int(body["format_version"])
            if version > FORMAT_VERSION:
                raise ValueError(f"format version {version} is newer than this keyedstate supports ({FORMAT_VERSION})")
            return cls(
                checkpoint_id=int(body["checkpoint_id"]),
                scope=str(body["scope"]),
                backend_kind=str(body["backend_kind"]),
                key_group_range=KeyGroupRange.from_json(body["key_group_range"]),
                # older manifests name the same number with Flink's word
                num_key_groups=int(body["num_key_groups"] if "num_key_groups" in body else body["max_parallelism"]),
                states=[StateMetadata.from_json(state) for state in body["states"]],
                raw_columns=[str(name) for name in body["raw_columns"]],
                files=[FileEntry.from_json(entry) for entry in body["files"]],
                uploaded_bytes=int(body["uploaded_bytes"]),
                total_bytes=int(body["total_bytes"]),
                created_at_ms=int(body["created_at_ms"]),
                format_version=version,
                checksum_algorithm=str(body["checksum_algorithm"]),
            )
        except SnapshotCorruptedError:
            raise
        except (ValueError, KeyError, TypeError) as error:
            raise SnapshotCorruptedError(f"snapshot manifest {where} is unreadable: {error}") from error


def _body_checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()
