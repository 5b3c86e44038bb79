"""What the clean-up reads from a Spark checkpoint location: the query id, when a batch last started or committed,
and whether the checkpoint still holds state rows a restart would restore."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Optional

from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, SnapshotError

__all__ = ["SparkCheckpoint", "arrow_uri"]

_HADOOP_S3 = re.compile(r"^s3[an]://", re.IGNORECASE)
_FILE_URI = re.compile(r"^file:(//)?(?=/)", re.IGNORECASE)


def arrow_uri(location: str) -> str:
    """``location`` as pyarrow names it: Spark's checkpoints are often given as Hadoop URIs (``s3a://``,
    ``file:/...``) that pyarrow does not know."""
    return _FILE_URI.sub("", _HADOOP_S3.sub("s3://", location))


class SparkCheckpoint:
    """A streaming query's checkpoint location, read through :class:`CheckpointStorage` (local or any pyarrow URI)."""

    def __init__(self, location: str, options: Optional[Mapping[str, Any]] = None) -> None:
        self.location = location
        try:
            self.storage = CheckpointStorage(arrow_uri(location), options=options, create=False)
        except ConfigurationError as error:
            raise ConfigurationError(f"checkpoint location {location!r} is not usable: {error}") from error

    def query_id(self) -> str:
        """The query id Spark keeps in ``<checkpoint>/metadata`` for the checkpoint's whole life."""
        if not self.storage.exists("metadata"):
            raise ConfigurationError(
                f"{self.location} is not a Spark checkpoint: it has no 'metadata' file (Spark writes it when a "
                f"streaming query first starts). Pass the checkpointLocation the query ran with")
        try:
            record = json.loads(self.storage.read_bytes("metadata").decode("utf-8").splitlines()[0])
            return str(record["id"])
        except (SnapshotError, ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError) as error:
            raise ConfigurationError(f"cannot read the query id from {self.location}/metadata: {error!r}") from error

    def last_batch_activity(self) -> Optional[float]:
        """When a batch last started (``offsets/N``) or committed (``commits/N``), in epoch seconds; None before any."""
        times = [mtime for directory in ("offsets", "commits")
                 for _, is_dir, mtime in self.storage.list_entries(directory) if not is_dir and mtime is not None]
        return max(times, default=None)

    def batch_ids(self, log: str = "commits") -> list[int]:
        """The batches of ``commits/`` (committed) or ``offsets/`` (started), ascending."""
        return sorted(int(name) for name, is_dir, _ in self.storage.list_entries(log) if not is_dir and name.isdigit())

    def batch_offsets(self, batch: int) -> tuple[list[Optional[dict]], dict]:
        """Each source's end offsets of ``batch`` (None for a source without), and the batch's metadata line."""
        lines = self.storage.read_bytes(f"offsets/{batch}").decode("utf-8").splitlines()
        metadata = json.loads(lines[1]) if len(lines) > 1 else {}
        sources: list[Optional[dict]] = []
        for line in lines[2:]:
            try:
                sources.append(json.loads(line) if line.strip() not in ("", "-") else None)
            except ValueError:
                sources.append({"raw": line})
        return sources, metadata

    def holds_state(self) -> bool:
        """Whether the checkpoint has state rows (``state/``): restarting it restores them, and in RocksDB mode they
        name files in the state storage."""
        return bool(self.storage.list_entries("state"))

    def exists(self) -> bool:
        return self.storage.exists()

    def size(self) -> tuple[int, int]:
        return self.storage.sizes()

    def delete(self) -> None:
        self.storage.delete_tree("")
