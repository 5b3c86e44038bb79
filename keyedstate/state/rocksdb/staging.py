"""Downloading a RocksDB snapshot into a local directory (verifying every file) and reading records from it by
key-group range. Used by the RocksDB restore (rescaling) and by the heap backend restoring a RocksDB snapshot."""

from __future__ import annotations

import os
from typing import Any, Iterator, Sequence

from keyedstate.checkpoint.manifest import SnapshotManifest
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import KeyGroupRange
from keyedstate.state.base.layout import key_group_of, key_group_prefix
from keyedstate.state.rocksdb.db import DEFAULT_CF, open_read_only
from keyedstate.state.rocksdb.errors import translate

__all__ = ["stage_snapshot", "StagedSnapshot", "records_in_ranges", "range_bounds"]


def stage_snapshot(manifest: SnapshotManifest, directory: str, storage: Any = None) -> str:
    """Download every file of ``manifest`` into ``directory`` under its snapshot name, checking size and sha256.

    Raises SnapshotCorruptedError naming the first bad file; nothing is opened before every file checked out.
    """
    storage = storage if storage is not None else manifest.storage
    if storage is None:
        raise ConfigurationError(f"{manifest.describe()} has no checkpoint storage to read its files from")
    os.makedirs(directory, exist_ok=True)
    for entry in manifest.files:
        storage.download_verified(entry, manifest, os.path.join(directory, entry.name))
    return directory


def range_bounds(key_groups: KeyGroupRange) -> tuple[bytes, bytes]:
    """Smallest stored key of the range and the first key after it (key groups fit in 2 bytes, < 2**15)."""
    return key_group_prefix(key_groups.start), key_group_prefix(key_groups.end + 1)


def records_in_ranges(records: Sequence[tuple[bytes, bytes]], ranges: Sequence[KeyGroupRange],
                      source_range: KeyGroupRange | None = None) -> Sequence[tuple[bytes, bytes]]:
    """The records whose key group lies in one of ``ranges`` (all of them, unfiltered, when one range covers the
    whole ``source_range`` the records come from)."""
    if source_range is not None and len(ranges) == 1 and ranges[0].intersection(source_range) == source_range:
        return records
    if len(ranges) == 1:
        start, end = ranges[0].start, ranges[0].end
        return [record for record in records if start <= key_group_of(record[0]) <= end]
    return [record for record in records if any(key_group_of(record[0]) in r for r in ranges)]


class StagedSnapshot:
    """A downloaded RocksDB snapshot opened read-only; iterate its column families within key-group ranges."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._db = open_read_only(directory)
        self.family_names = [name for name in self._db.list_cf(directory) if name != DEFAULT_CF]

    def records(self, family_name: str, ranges: Sequence[KeyGroupRange]) -> Iterator[tuple[bytes, bytes]]:
        """Ascending records of one column family, only key groups inside ``ranges`` (range scans: unowned key
        groups are never read)."""
        family = self._db.get_column_family(family_name)
        try:
            for key_groups in ranges:
                start, end = range_bounds(key_groups)
                for key, value in family.items(from_key=start):
                    if key >= end:
                        break
                    yield key, value
        except Exception as error:
            raise translate(error, f"read column family {family_name!r} of a staged snapshot", self.directory) from error
        finally:
            del family

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> "StagedSnapshot":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
