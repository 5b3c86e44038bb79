"""Harness snapshots: the committed row of every key group the harness holds, written by Spark's save step.

A snapshot holds, per key group with state or timers, exactly the row a Spark micro-batch would commit for it in the
same state mode (:mod:`keyedstate.state.key_groups`): ``backend="heap"`` the format-1 row with the whole state and
timers of the group; ``backend="rocksdb"`` the format-2 version record naming a base snapshot and changelogs that
the harness stored in its ``checkpoint_dir``. Restoring loads each owned key group's row through the same step, so
a snapshot restores into any partitioning of the key groups (rescaling), and several partitions' snapshots restore
into one harness.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import key_group_of_stored_key
from keyedstate.state.base.backend import KeyedStateBackend, StateMetadata
from keyedstate.state.key_groups.memory_group_state import MemoryGroupState
from keyedstate.state.key_groups.row_store import Records, RowKeyGroupStore
from keyedstate.state.key_groups.versioned import committed_version, save_version, version_row
from keyedstate.state.rocksdb.backend import RocksDBKeyedStateBackend
from keyedstate.state.rocksdb.changelog import ChangeLog
from keyedstate.state.rocksdb.key_group_slices import (
    checkpoint_key_group,
    key_group_contents,
    key_group_is_empty,
    load_key_group,
    metadata_ops,
    split_changes,
)
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy, VersionRecord

__all__ = ["HarnessSnapshot", "HarnessRowStore", "HarnessVersionStore", "harness_store"]


@dataclass(frozen=True)
class HarnessSnapshot:
    """What :meth:`KeyedProcessHarness.snapshot` (and ``KeyedCoProcessHarness.snapshot``) returns and
    :meth:`KeyedProcessHarness.restore` (and ``KeyedCoProcessHarness.restore``) takes.

    ``rows`` maps each key group holding state or timers to its committed row (the tuple Spark's state store would
    hold for it; :class:`~keyedstate.state.key_groups.row_format.StateRow`): a key is in the key group keyed_process
    gives it (:func:`keyedstate.keygroups.key_group_of_key`). ``storage_uri`` is the harness's ``checkpoint_dir``,
    where RocksDB snapshots keep their files. ``key_types`` are the key column types the harness was given (None:
    inferred from each key); a restore assigns key groups with them."""

    checkpoint_id: int
    storage_uri: str
    rows: Mapping[int, tuple[Any, ...]]
    processing_time: int
    num_key_groups: int
    backend_kind: str = field(default="heap")
    key_types: Optional[tuple[str, ...]] = None

    @property
    def max_parallelism(self) -> int:
        """Deprecated alias of :attr:`num_key_groups` (PyFlink's name)."""
        warnings.warn("HarnessSnapshot.max_parallelism is a deprecated alias of num_key_groups", DeprecationWarning,
                      stacklevel=2)
        return self.num_key_groups


class HarnessRowStore(RowKeyGroupStore):
    """Row mode's store over the harness's heap backend, which holds every owned key group at once: a snapshot
    saves each key group's row from the records exported once and split by key group."""

    def __init__(self, backend: KeyedStateBackend) -> None:
        super().__init__(backend.num_key_groups, backend=backend)
        self._exported: dict[int, Records] = {}

    def _export(self, key_group: int) -> Records:
        return self._exported.get(key_group, [])

    def finish(self, key_group: int, timer_service: Any, succeeded: bool) -> None:
        """Nothing to release: the harness keeps every key group loaded."""

    def snapshot(self, checkpoint_id: int, timer_service: Any) -> dict[int, tuple[Any, ...]]:
        self.backend.prepare_snapshot()
        self._exported = _split_records(self.backend.export_records())
        with_timers = set(timer_service.key_groups_with_timers())
        rows = {}
        try:
            for key_group in sorted(set(self._exported) | with_timers):
                holder = MemoryGroupState()
                self.save(key_group, holder, checkpoint_id, timer_service, key_group in with_timers)
                if holder.exists:
                    rows[key_group] = holder.get
        finally:
            self._exported = {}
        return rows

    def restore(self, rows: Mapping[int, tuple[Any, ...]], timer_service: Any) -> None:
        for key_group, row in sorted(rows.items()):
            self.load(key_group, MemoryGroupState(row), None, timer_service)

    def close(self) -> None:
        """Nothing to release."""


def _split_records(exported: Records) -> dict[int, Records]:
    by_group: dict[int, Records] = {}
    for metadata, records in exported:
        split: dict[int, list[tuple[bytes, bytes]]] = {}
        for record in records:
            key_group = key_group_of_stored_key(record[0])
            group = split.get(key_group)
            if group is None:
                group = split[key_group] = []
            group.append(record)
        for key_group, group in split.items():
            by_group.setdefault(key_group, []).append((metadata, group))
    return by_group


class _KeyGroupOfBackend:
    """One key group of the harness's RocksDB backend as the source of a base snapshot."""

    def __init__(self, backend: Any, key_group: int) -> None:
        self.backend = backend
        self.key_group = key_group

    def checkpoint(self, target: str) -> None:
        checkpoint_key_group(self.backend, self.key_group, target)

    def state_metadata(self) -> list[StateMetadata]:
        return self.backend.state_metadata()

    def raw_column_names(self) -> list[str]:
        return self.backend.raw_column_names()


class _KeptVersions(KeyGroupVersions):
    def collect_garbage(self, record: VersionRecord) -> list[str]:
        return []  # see HarnessVersionStore: every harness snapshot stays restorable


class HarnessVersionStore:
    """RocksDB mode's save step over the harness's RocksDB backend (one database, every owned key group).

    A snapshot cuts the writes recorded since the previous one into key groups; each changed key group gets a new
    version in ``storage`` exactly as a Spark call writes it (:func:`~keyedstate.state.key_groups.versioned.
    save_version`: one changelog, or a new base snapshot of that key group alone when the policy asks for one), and
    unchanged key groups keep their row. Nothing is ever deleted from ``storage``: every snapshot a test took stays
    restorable (any number of harnesses may restore it and go on writing)."""

    def __init__(self, backend: RocksDBKeyedStateBackend, storage: CheckpointStorage,
                 policy: Optional[SnapshotPolicy] = None) -> None:
        self.backend = backend
        self.storage = storage
        self.num_key_groups = backend.num_key_groups
        self.policy = policy or SnapshotPolicy()
        self._records: dict[int, VersionRecord] = {}
        """The newest version of each key group, as far as it continues in ``storage``."""
        self._rows: dict[int, tuple[Any, ...]] = {}
        self._rewrite: set[int] = set()
        """Key groups restored from versions this harness cannot continue (another storage): stored whole next."""
        self._work = tempfile.mkdtemp(prefix="keyedstate-harness-snapshot-")

    def _versions(self, storage: CheckpointStorage, key_group: int) -> KeyGroupVersions:
        return _KeptVersions(storage, key_group, self.num_key_groups)

    def snapshot(self, checkpoint_id: int, timer_service: Any) -> dict[int, tuple[Any, ...]]:
        backend = self.backend
        backend.prepare_snapshot()
        recording = backend.record_changes
        changes = backend.take_changes()
        by_group = split_changes(changes, backend.key_group_range)
        if not recording:  # a backend given by the caller that does not record: every key group is stored whole
            self._rewrite |= set(by_group)
            for gone in set(self._rows) - set(by_group):  # emptied since the last snapshot
                del self._rows[gone]
                self._records.pop(gone, None)
        metadata = metadata_ops(backend)
        for key_group in sorted(set(by_group) | self._rewrite):
            record = None if key_group in self._rewrite else self._records.get(key_group)
            ops = key_group_contents(backend, key_group) if record is None else by_group.get(key_group, [])
            if record is None and key_group_is_empty(backend, key_group):
                self._rows.pop(key_group, None)  # like a Spark group that holds nothing: no row
                self._records.pop(key_group, None)
                continue
            new, _ = save_version(_KeyGroupOfBackend(backend, key_group), self._versions(self.storage, key_group),
                                  record, ChangeLog(metadata + ops), checkpoint_id, self.policy, 1 << 62,
                                  os.path.join(self._work, f"kg-{key_group:05d}"))
            assert new is not None
            self._records[key_group] = new
            self._rows[key_group] = version_row(self.num_key_groups, new)
        self._rewrite.clear()
        return dict(self._rows)

    def restore(self, rows: Mapping[int, tuple[Any, ...]], timer_service: Any) -> None:
        """Download and verify every owned key group's version first, then load them (a damaged file fails the
        restore naming it, before anything is loaded)."""
        storages = {self.storage.location: self.storage}
        staged = []
        try:
            for key_group, row in sorted(rows.items()):
                record = committed_version(MemoryGroupState(row), self.num_key_groups)
                assert record is not None
                storage = storages.get(record.location)
                if storage is None:
                    storage = storages[record.location] = CheckpointStorage(record.location)
                versions = self._versions(storage, key_group)
                directory = None
                if record.base is not None:
                    directory = os.path.join(self._work, f"restore-{key_group:05d}")
                    changelogs = versions.restore(record, directory)
                else:
                    changelogs = versions.read_changelogs(record)
                staged.append((key_group, row, record, directory, changelogs))
            for key_group, row, record, directory, changelogs in staged:
                load_key_group(self.backend, key_group, directory, changelogs)
                if record.location == self.storage.location:
                    self._records[key_group] = record
                    self._rows[key_group] = row
                else:
                    self._rewrite.add(key_group)
        finally:
            for _, _, _, directory, _ in staged:
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)
        self.backend.take_changes()  # what was loaded is stored already
        for key_group, *_ in staged:
            timer_service.reload_key_group(key_group)

    def close(self) -> None:
        shutil.rmtree(self._work, ignore_errors=True)


def harness_store(backend: KeyedStateBackend, checkpoint_dir: str) -> Any:
    """The save/restore step for the harness's backend."""
    if backend.backend_kind == "heap":
        return HarnessRowStore(backend)
    if backend.backend_kind == "rocksdb":
        assert isinstance(backend, RocksDBKeyedStateBackend)
        return HarnessVersionStore(backend, CheckpointStorage(checkpoint_dir))
    raise ConfigurationError(
        f"the harness snapshots heap and RocksDB backends, got a backend of kind {backend.backend_kind!r}"
    )
