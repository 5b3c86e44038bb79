"""RocksDB mode's save step of one key group (format 2): what changed becomes one changelog or a new base snapshot in
durable storage, and the committed row names the new version.

Shared by Spark's store (:class:`keyedstate.spark.rocksdb_mode.RocksDBKeyGroupStore`, one local database per key
group) and the harness's (:class:`keyedstate.testing.snapshots.HarnessVersionStore`, one database for every owned
key group); they differ only in where the key group's changes and its RocksDB checkpoint come from (``source``).
"""

from __future__ import annotations

import shutil
import uuid
from typing import Any, Optional, Protocol

from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.key_groups.row_format import STATE_ROW_FORMAT_ROCKSDB, StateRow
from keyedstate.state.key_groups.store import ROCKSDB, committed_row
from keyedstate.state.rocksdb.changelog import ChangeLog
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy, VersionRecord

__all__ = ["KeyGroupSource", "committed_version", "save_version", "version_row"]


class KeyGroupSource(Protocol):
    """What a new base snapshot of one key group is made of."""

    def checkpoint(self, target: str) -> None:
        """A RocksDB checkpoint holding exactly the key group's state, timers and state metadata, in ``target``."""

    def state_metadata(self) -> list[StateMetadata]: ...

    def raw_column_names(self) -> list[str]: ...


def committed_version(group_state: Any, num_key_groups: int) -> Optional[VersionRecord]:
    """The version the group's committed row names (None before the first)."""
    row = committed_row(group_state, num_key_groups, ROCKSDB)
    return None if row is None else VersionRecord.from_bytes(row.state)


def version_row(num_key_groups: int, record: VersionRecord) -> tuple[Any, ...]:
    """The committed row (format 2) naming ``record``."""
    return StateRow(STATE_ROW_FORMAT_ROCKSDB, num_key_groups, record.to_bytes(), b"", record.base_batch,
                    record.tag).to_tuple()


def save_version(source: KeyGroupSource, versions: KeyGroupVersions, record: Optional[VersionRecord],
                 changes: ChangeLog, batch: int, policy: SnapshotPolicy, retain_batches: int,
                 work_path: str, *, full_base: bool = False) -> tuple[Optional[VersionRecord], int]:
    """Store ``changes`` (the key group's writes since ``record``) as the next version; returns it (``record``
    itself when nothing changed) and the bytes written durably. ``work_path`` + a suffix is where a new base's
    RocksDB checkpoint is made (on the local database's file system, so SSTs are hard links).

    ``full_base``: the next version is a base of everything that builds on no earlier version (the first version of
    a query started from a bootstrap, so that no version of the query names a file of the bootstrap)."""
    if not changes and not full_base:
        return record, 0
    tag = uuid.uuid4().hex[:16]
    encoded = b"" if full_base else changes.encode()
    if full_base or policy.wants_base(record, len(encoded)):
        bridge: tuple = ("", ())
        if record is not None and not full_base:  # a local database a few versions behind catches up across the base
            bridge = record.bridge_to_next_base(versions.store_changelog(encoded, batch, tag))
        checkpoint = f"{work_path}.base-{tag}"
        try:
            source.checkpoint(checkpoint)
            new, written = versions.write_base(None if full_base else record, checkpoint, batch, tag,
                                               source.state_metadata(), source.raw_column_names(), retain_batches,
                                               bridge)
            return new, written + (bridge[1][-1].size if bridge[1] else 0)
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
    new = versions.write_changelog(record, encoded, batch, tag)
    return new, new.changelogs[-1].size
