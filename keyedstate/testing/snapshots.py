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
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import KeyGroupRange, key_group_of_stored_key, key_group_prefix
from keyedstate.state.base.backend import KeyedStateBackend, StateMetadata
from keyedstate.state.base.kinds import HEAP, ROCKSDB
from keyedstate.state.key_groups.memory_group_state import MemoryGroupState
from keyedstate.state.key_groups.row_store import Records, RowKeyGroupStore
from keyedstate.state.key_groups.versioned import LocalCopy, RocksDBKeyGroupStore
from keyedstate.state.rocksdb.backend import RocksDBKeyedStateBackend
from keyedstate.state.rocksdb.changelog import DELETE_RANGE, ChangeLog, Operation
from keyedstate.state.rocksdb.db import DEFAULT_CF, RAW_CF_PREFIX, STATE_CF_PREFIX, RocksDatabase
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy, VersionRecord
from keyedstate.testing.temporary import remove_temporary_directory, temporary_directory

__all__ = ["HarnessSnapshot", "HarnessRowStore", "HarnessRocksDBStore", "harness_store"]


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
    backend_kind: str = field(default=HEAP)
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
            split.setdefault(key_group_of_stored_key(record[0]), []).append(record)
        for key_group, group in split.items():
            by_group.setdefault(key_group, []).append((metadata, group))
    return by_group


def _by_key_group(changes: ChangeLog, owned: KeyGroupRange) -> dict[int, list[Operation]]:
    """The operations of ``changes`` on keyed column families (states, raw columns), by key group; a range delete
    spanning key groups is cut into one per key group. Those on the default family (state metadata) are left out."""
    by_group: dict[int, list[Operation]] = {}
    for op in changes.ops:
        kind, family, key, value = op
        if family == DEFAULT_CF:
            continue
        end = value or b""
        if kind != DELETE_RANGE or (len(key) >= 2 and len(end) >= 2 and key[:2] == end[:2]):
            by_group.setdefault(key_group_of_stored_key(key), []).append(op)  # a range within one key group too
            continue
        for key_group in owned:
            start, stop = key_group_prefix(key_group), key_group_prefix(key_group + 1)
            if start < end and key < stop:
                by_group.setdefault(key_group, []).append((kind, family, max(key, start), min(end, stop)))
    return by_group


class _KeptVersions(KeyGroupVersions):
    def collect_garbage(self, record: VersionRecord) -> list[str]:
        return []  # see HarnessRocksDBStore: every harness snapshot stays restorable


class HarnessRocksDBStore(RocksDBKeyGroupStore):
    """RocksDB mode's store, the one Spark runs, over the harness's RocksDB backend (one database, every owned key
    group). It is its own :class:`~keyedstate.state.rocksdb.recording.KeyGroupDatabases`, the harness's database
    seen one key group at a time, and :class:`~keyedstate.state.key_groups.versioned.LocalCopies`: every key group
    stays open in it at the version last saved or restored.

    A snapshot cuts the writes recorded since the previous one into key groups and runs a call per changed key
    group, which stores its share exactly as a Spark call stores its writes (one changelog, or a new base snapshot
    of that key group alone when the policy asks for one); unchanged key groups keep their row. A restore runs a call
    per key group, which loads its version into the harness's database (one of another harness's storage is stored
    whole, as a new chain, by the next snapshot). Nothing is ever deleted from ``storage``: every snapshot a test took
    stays restorable (any number of harnesses may restore it and go on writing)."""

    def __init__(self, backend: RocksDBKeyedStateBackend, storage: CheckpointStorage,
                 policy: Optional[SnapshotPolicy] = None) -> None:
        super().__init__(backend, self, self, num_key_groups=backend.num_key_groups, policy=policy,
                         retain_batches=1 << 62)
        self.harness = backend
        self.storage = storage
        self.storages = {storage.location: storage}
        self.rows: dict[int, tuple[Any, ...]] = {}
        self.rewrite: set[int] = set()  # restored from another storage: stored whole by the next snapshot
        self.tags: dict[int, str] = {}  # the version each key group holds
        self.changes: dict[int, list[Operation]] = {}  # each key group's share of what the running snapshot stores
        self.whole: set[int] = set()  # opened with no version: all they hold is their changes
        self.key_group = -1
        self.attached = False
        self._work = temporary_directory("keyedstate-harness-snapshot-")

    def snapshot(self, checkpoint_id: int, timer_service: Any) -> dict[int, tuple[Any, ...]]:
        self.harness.prepare_snapshot()
        recording = self.harness.record_changes
        self.changes = _by_key_group(self.harness.take_changes(), self.harness.key_group_range)
        if not recording:  # a backend given by the caller that does not record: every key group is stored whole
            self.rows.clear()
            self.tags.clear()
        for key_group in sorted(set(self.changes) | self.rewrite):
            self._call(key_group, self.rows.get(key_group), checkpoint_id)
        self.rewrite.clear()
        return dict(self.rows)

    def restore(self, rows: Mapping[int, tuple[Any, ...]], timer_service: Any) -> None:
        for key_group, row in sorted(rows.items()):
            self._call(key_group, row, None)
        self.harness.take_changes()  # what was loaded is stored already
        for key_group in sorted(rows):
            timer_service.reload_key_group(key_group)

    def _call(self, key_group: int, row: Optional[tuple[Any, ...]], batch: Optional[int]) -> None:
        """One call of the store on ``key_group``; the timers stay in the harness's timer service (no timer
        service: the call neither reloads nor forgets them)."""
        holder = MemoryGroupState(row)
        self.load(key_group, holder, batch, None)
        succeeded = False
        try:
            assert self.call is not None
            if self.call.source is self.call.versions:
                self.save(key_group, holder, batch, None, False)
            else:  # loaded from another harness's storage: no version of it is continued here
                self.rewrite.add(key_group)
                holder.remove()
            succeeded = True
        finally:
            self.finish(key_group, None, succeeded)
        if holder.exists:
            self.rows[key_group] = holder.get
        else:
            self.rows.pop(key_group, None)

    def close(self) -> None:
        remove_temporary_directory(self._work)

    def versions(self, key_group: int, record: Optional[VersionRecord],
                 batch_id: Optional[int]) -> tuple[KeyGroupVersions, KeyGroupVersions]:
        location = record.location if record is not None and record.location else self.storage.location
        if location not in self.storages:
            self.storages[location] = CheckpointStorage(location)
        versions = _KeptVersions(self.storage, key_group, self.num_key_groups)
        if location == self.storage.location:
            return versions, versions
        return versions, _KeptVersions(self.storages[location], key_group, self.num_key_groups)

    def acquire(self, key_group: int, record: Optional[VersionRecord], versions: KeyGroupVersions) -> LocalCopy:
        self.key_group = key_group
        tag = self.tags.get(key_group)
        return LocalCopy(os.path.join(self._work, f"kg-{key_group:05d}"), tag, kept=self if tag else None,
                         keepable=True)

    def keep(self, copy: LocalCopy, database: Any, tag: str) -> bool:
        self.tags[self.key_group] = tag
        return True

    def discard(self, copy: LocalCopy) -> None:
        self.tags.pop(self.key_group, None)

    def open_path(self, copy: LocalCopy) -> str:
        return copy.path

    def owns(self, copy: LocalCopy) -> bool:
        return True  # the harness's work directory is its own

    def abandon(self, copy: LocalCopy, database: Any) -> None:
        pass

    def release(self, copy: LocalCopy) -> None:
        pass

    def open_key_group(self, path: str, record_changes: bool = True) -> None:
        """``path`` holds the key group's restored base, copied into the harness's database, or nothing."""
        if os.path.exists(os.path.join(path, "CURRENT")):
            base = RocksDatabase(path, replace(self.harness.options, reuse_existing=True), collect_on_close=False)
            try:
                self.harness.replay(base.contents_as_changes())
            finally:
                base.close()
        shutil.rmtree(path, ignore_errors=True)
        self.attach_key_group(self)
        if not record_changes:
            self.whole.add(self.key_group)

    def attach_key_group(self, database: Any) -> None:
        self.attached = True
        self.whole.discard(self.key_group)

    def detach_key_group(self) -> Any:
        self.attached = False
        return self

    def close_key_group(self) -> None:
        self.attached = False

    def start_recording(self) -> None:
        self.whole.discard(self.key_group)

    def take_changes(self) -> ChangeLog:
        if self.key_group in self.whole:
            return self.harness.contents(self.key_group)
        ops = self.changes.pop(self.key_group, [])
        # each changelog starts with every state's metadata: a key group restored alone knows its states
        return ChangeLog(self.harness.metadata_changes().ops + ops if ops else [])

    def replay(self, changes: ChangeLog) -> None:
        owned = KeyGroupRange(self.key_group, self.key_group)
        self.harness.replay(ChangeLog([op for op in changes.ops if op[1] == DEFAULT_CF]
                                      + _by_key_group(changes, owned).get(self.key_group, [])))

    def is_empty(self) -> bool:
        return self.harness.is_empty(self.key_group)

    def checkpoint(self, target: str) -> None:
        """A checkpoint of a new database holding the key group alone, in the column families the harness's has."""
        self.harness.cleanup_expired_state()
        work = f"{target}.work"
        database = RocksDatabase(work, replace(self.harness.options, reuse_existing=False), collect_on_close=False)
        try:
            for name in self.harness.stored_state_names():
                database.column_family(STATE_CF_PREFIX + name)  # empty ones too: the restored database knows them
            for name in self.harness.raw_column_names():
                database.column_family(RAW_CF_PREFIX + name)
            self.harness.contents(self.key_group).apply(database)
            database.checkpoint(target)
        finally:
            database.close()
            shutil.rmtree(work, ignore_errors=True)

    def live_sst_files(self) -> Optional[dict[str, int]]:
        return None  # each base is a new database: none of its files is an earlier base's

    def state_metadata(self) -> list[StateMetadata]:
        return self.harness.state_metadata()

    def raw_column_names(self) -> list[str]:
        return self.harness.raw_column_names()

    def estimate_keys_with_state(self) -> int:
        return -1  # for Spark's metrics only

    def estimate_state_bytes(self) -> int:
        return -1


def harness_store(backend: KeyedStateBackend, checkpoint_dir: str, policy: Optional[SnapshotPolicy] = None) -> Any:
    """The save/restore step for the harness's backend; ``policy`` decides a RocksDB key group's new bases."""
    if backend.backend_kind == HEAP:
        return HarnessRowStore(backend)
    if backend.backend_kind == ROCKSDB:
        assert isinstance(backend, RocksDBKeyedStateBackend)
        return HarnessRocksDBStore(backend, CheckpointStorage(checkpoint_dir), policy)
    raise ConfigurationError(
        f"the harness snapshots heap and RocksDB backends, got a backend of kind {backend.backend_kind!r}"
    )
