"""RocksDB mode (``state_backend="rocksdb"``): a key group's state and timers live in a local RocksDB database on
the executor; a call writes durably only what it changed.

The commit protocol. Python gets no end-of-task hook, so the key group's Spark state row stays the commit record.
It carries a :class:`~keyedstate.state.rocksdb.versions.VersionRecord`: the version's tag (unique per
call), the base snapshot it builds on and the changelogs since, in durable storage (``state_storage``). A call:

1. reads the row and takes a local copy of the key group's database (``<local dir>/<query id>/<uid>/kg-NNNNN``,
   ``kg-NNNNN.c1``, ...: each worker process keeps its own, see :mod:`keyedstate.spark.local_databases`): the one
   this worker keeps open since an earlier call (:mod:`keyedstate.spark.open_databases`, its tag in memory), else a
   free one, preferring a closed copy whose ``TAG`` file holds the row's tag. A copy at the row's tag is used as it
   is; one at an earlier version of the row's chain (the base's tag, or the tag of one of its changelogs, or for a
   few batches after a new base, a version the base's bridge leads from:
   :mod:`~keyedstate.state.rocksdb.version_record`) replays the changelogs after it (from the local copy of those
   written on this machine when it has them: :mod:`keyedstate.spark.local_changelogs`); any other is rebuilt: base
   downloaded and verified, changelogs replayed. The ``TAG`` file is removed before the database is opened, so a
   process that dies while it has the database open leaves no tag.
2. runs timers and elements on the database, recording every write.
3. stores the writes as one changelog file, or, when the changelogs since the base grow past the
   :class:`~keyedstate.state.rocksdb.versions.SnapshotPolicy`, a new base snapshot (only SSTs not stored yet
   are uploaded), and writes the row naming the new version.
4. keeps the database open with the new tag for the key group's next call, or (a first call, a failed call,
   another worker waiting for it, or no worker reuse) closes (flushes) it and writes the new ``TAG``. Only while
   the lock file it holds is still the one at the path: if the directory and its lock were deleted meanwhile,
   another process may own the path, and the database is abandoned without writing into it.

So correctness never depends on the local database: a retried or duplicate task attempt, the data run and the
timed-out run of one task in different worker processes, a lost executor or a restarted query all find either a
local database at the committed version (or one it can reach by replaying committed changelogs) or rebuild the
committed version from storage. RocksDB's memory is bounded
per worker process: the databases it keeps open share one block cache and one memtable budget
(:class:`~keyedstate.state.rocksdb.options.RocksDBOptions`), and at most
:data:`~keyedstate.spark.open_databases.MAX_KEPT_DATABASES` stay open.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import replace
from typing import Any, Optional

from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.locations import last_segment
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import SnapshotCorruptedError, StateStorageConflictError, StateVersionNotRetainedError
from keyedstate.redaction import redact_uri, without_credentials
from keyedstate.spark.compat import current_query_id, current_run_id, task_partition_id
from keyedstate.spark.local_changelogs import LocalChangelogs
from keyedstate.spark.local_databases import LocalDatabases
from keyedstate.spark.open_databases import OpenDatabases, abandon, open_databases_of, worker_reuse_enabled
from keyedstate.spark.query_settings import operator_storage_location
from keyedstate.spark.storage_claims import check_single_writer
from keyedstate.state.key_groups.initial_state import InitialState, check_origin
from keyedstate.state.key_groups.store import KeyGroupStore
from keyedstate.state.key_groups.versioned import committed_version, save_version, version_row
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend
from keyedstate.state.rocksdb.options import ARENA_BLOCK_BYTES, RocksDBOptions
from keyedstate.state.rocksdb.recording import KeyGroupDatabases
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy, VersionRecord

__all__ = ["RocksDBKeyGroupStore", "default_local_dir", "default_state_storage"]

logger = logging.getLogger("keyedstate.spark.rocksdb")

_NO_QUERY = "no-query"  # outside a streaming query (a unit test calling the group function directly)


def default_local_dir() -> str:
    """Where executors keep their local databases: ``$KEYEDSTATE_LOCAL_DIR``, else the first of Spark's local
    directories (``SPARK_LOCAL_DIRS``), else the system temporary directory; ``keyedstate-rocksdb`` below it."""
    explicit = os.environ.get("KEYEDSTATE_LOCAL_DIR")
    if explicit:
        return explicit
    spark_dirs = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0]
    return os.path.join(spark_dirs or tempfile.gettempdir(), "keyedstate-rocksdb")


def default_state_storage() -> str:
    """The durable storage used when ``state_storage`` is not given (single machine only):
    ``$KEYEDSTATE_STATE_STORAGE``, else ``~/.keyedstate/state-storage``."""
    return os.environ.get("KEYEDSTATE_STATE_STORAGE") or os.path.join(
        os.path.expanduser("~"), ".keyedstate", "state-storage")


class RocksDBKeyGroupStore(KeyGroupStore):
    """One per worker process and query definition; points its backend at one key group's database per call."""

    def __init__(self, num_key_groups: int, ttl_clock: Any, *, state_storage: str,
                 storage_options: Optional[StorageOptions] = None, local_dir: Optional[str],
                 uid: str, options: Optional[RocksDBOptions] = None, policy: Optional[SnapshotPolicy] = None,
                 retain_batches: int = 100, keep_open: Optional[bool] = None,
                 initial_state: Optional[InitialState] = None, scope: Optional[tuple[str, str]] = None) -> None:
        """``scope``: (local directory name, storage location) instead of the query's (query id,
        ``<state_storage>/<query id>/<uid>``): where bootstrap_keyed_state writes."""
        self.num_key_groups = num_key_groups
        self.state_storage = state_storage
        self.initial_state = initial_state
        self.origin = initial_state.bootstrap_id if initial_state is not None else ""
        self.scope = scope
        self.storage_options = storage_options
        self.uid = uid
        self.policy = policy or SnapshotPolicy()
        self.retain_batches = retain_batches
        self._storages: dict[str, CheckpointStorage] = {}
        options = self.options = replace(options or RocksDBOptions(), reuse_existing=True)
        self.local = LocalDatabases(local_dir or default_local_dir(), lock_timeout_seconds=max(
            300.0, options.lock_timeout_seconds))
        keep_open = worker_reuse_enabled() if keep_open is None else keep_open
        self.open: Optional[OpenDatabases] = open_databases_of(self.local) if keep_open else None
        if self.open is not None:
            self.open.limit_families(options.memtable_budget_bytes, ARENA_BLOCK_BYTES)
        self._lock: Optional[int] = None
        # The backend needs an open database before any key group is opened (the function's open() registers its
        # states): an empty one of this worker process, never written to afterwards.
        self.backend: KeyGroupDatabases = KeyGroupRocksDBBackend(
            self.local.idle_path(), num_key_groups=num_key_groups, ttl_clock=ttl_clock, options=options)
        self._call: Optional[tuple[str, Optional[VersionRecord], KeyGroupVersions]] = None
        self._handle: Optional[str] = None  # the path the call's database was opened with
        self._saved_tag: Optional[str] = None
        self._bootstrapped = False  # this call restored the bootstrap's version, not a committed one

    def _storage(self, query_id: str) -> CheckpointStorage:
        storage = self._storages.get(query_id)
        if storage is None:
            location = self.scope[1] if self.scope else operator_storage_location(self.state_storage, query_id,
                                                                                   self.uid)
            storage = self._storages[query_id] = CheckpointStorage(location, options=self.storage_options)
        return storage

    def load(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any) -> None:
        query_id = self.scope[0] if self.scope else current_query_id() or _NO_QUERY
        local = self.local
        local.sweep()
        record = self._committed_record(group_state)
        self._bootstrapped = False
        if record is not None:
            check_origin(key_group, record.origin or None, self.initial_state)
        elif self.initial_state is not None and self.initial_state.holds(key_group):
            row = self.initial_state.row(key_group)
            assert row is not None
            record = VersionRecord.from_bytes(row.state)
            self._bootstrapped = True
        storage = self._storage(query_id)
        run_id = current_run_id()
        if run_id is not None and self.scope is None:
            check_single_writer(storage, run_id, batch_id)
        if (record is not None and record.location and without_credentials(record.location) != storage.location
                and not self._bootstrapped):
            raise StateStorageConflictError(_moved_message(key_group, record, storage.location, self.uid))
        versions = KeyGroupVersions(storage, key_group, self.num_key_groups,
                                    cache=LocalChangelogs(local.changelogs_path(query_id, self.uid, key_group)))
        copies = local.copies(query_id, self.uid, key_group)
        kept_path, kept = self.open.take_first(copies) if self.open is not None else (None, None)
        if kept is not None and not local.owns(kept_path, kept.lock):  # deleted under it: not ours any more
            abandon(local, kept_path, kept.database)
            local.release(kept.lock)
            kept = None
        self._saved_tag = None
        if kept is not None:
            assert kept_path is not None
            path = kept_path
            self._lock = kept.lock  # released in finish(), which the group function always calls
            self._call = (path, record, versions)
            if self._still_current(kept, record, path):
                self.backend.attach_key_group(kept.database)
                self._handle = kept.database.path
                timer_service.reload_key_group(key_group)
                return
            missed = self._missed_changelogs(kept.tag, record, versions, key_group, batch_id) if (
                kept.database.settings == self.options and os.path.exists(os.path.join(path, "CURRENT"))) else None
            if missed is not None:
                self.backend.attach_key_group(kept.database)
                self._handle = kept.database.path
                self._catch_up(missed, key_group, batch_id, path)
                timer_service.reload_key_group(key_group)
                return
            _close_quietly(kept.database)  # a failed attempt's writes, or a version Spark did not commit
            local.drop_handle(kept.database.path)
        else:
            os.makedirs(os.path.dirname(copies[0]), exist_ok=True)
            path, self._lock = self._claim_copy(copies, record, versions)
            self._call = (path, record, versions)
            if self.open is not None:
                self.open.use(path)
        changelogs: list = []
        missed = None
        if record is None:
            shutil.rmtree(path, ignore_errors=True)
        elif kept is None and (tag := local.read_tag(path)) != record.tag and not self._bootstrapped:
            missed = self._missed_changelogs(tag, record, versions, key_group, batch_id)
        if record is not None and missed is None and (kept is not None or local.read_tag(path) != record.tag):
            source = versions
            if self._bootstrapped:
                assert self.initial_state is not None
                source = KeyGroupVersions(self.initial_state.storage(), key_group, self.num_key_groups)
            logger.info("key group %d, batch %s: rebuilding the local state from %s (base batch %s + %d changelogs)",
                        key_group, batch_id, source.storage.location, record.base_batch, len(record.changelogs))
            try:
                changelogs = source.restore(record, path)
            except SnapshotCorruptedError as error:
                explained = _not_retained(key_group, batch_id, source, self.retain_batches, error)
                if explained is None:
                    raise
                raise explained from error
        os.makedirs(path, exist_ok=True)
        local.remove_tag(path)  # from here until finish() the database may differ from every committed version
        # opened through a handle of this process: see LocalDatabases.handle and finish()
        self._handle = local.handle(path)
        self.backend.open_key_group(self._handle, record_changes=record is not None)
        if missed is not None:
            self._catch_up(missed, key_group, batch_id, path)
        for changelog in changelogs:
            self.backend.replay(changelog)
        timer_service.reload_key_group(key_group)

    def _claim_copy(self, copies: list[str], record: Optional[VersionRecord],
                    versions: KeyGroupVersions) -> tuple[str, int]:
        """Lock a copy of the key group's database no other process holds, preferring one at the committed version,
        then one that can catch up to it; all held: wait for the first (its holder is asked to give it up)."""
        best: Optional[tuple[int, str, int]] = None
        for path in copies:
            is_new = not os.path.exists(path + ".lock")
            lock = self.local.try_acquire(path)
            if lock is not None:
                tag = self.local.read_tag(path)
                score = 0 if record is None or tag is None else 2 if tag == record.tag else int(
                    versions.is_in_chain(record, tag))
                if best is None or score > best[0]:
                    if best is not None:
                        self.local.release(best[2])
                    best = (score, path, lock)
                else:
                    self.local.release(lock)
                if score == 2:
                    break
            if is_new:
                break  # copies are made in order: none exists past this one
        if best is None:
            return copies[0], self.local.acquire(copies[0])
        return best[1], best[2]

    def _missed_changelogs(self, tag: Optional[str], record: Optional[VersionRecord], versions: KeyGroupVersions,
                           key_group: int, batch_id: Optional[int]) -> Optional[list]:
        if record is None or self._bootstrapped:
            return None
        try:
            return versions.changelogs_after(record, tag)
        except SnapshotCorruptedError as error:
            explained = _not_retained(key_group, batch_id, versions, self.retain_batches, error)
            if explained is None:
                raise
            raise explained from error

    def _catch_up(self, missed: list, key_group: int, batch_id: Optional[int], path: str) -> None:
        logger.debug("key group %d, batch %s: %s catches up by %d changelogs", key_group, batch_id, path, len(missed))
        for changelog in missed:
            self.backend.replay(changelog)

    def _still_current(self, kept: Any, record: Optional[VersionRecord], path: str) -> bool:
        """A kept database serves the call only if it holds the committed version, was opened with this store's
        options, and its directory was not removed under it (disk cleanup, a test losing local databases)."""
        return (record is not None and kept.tag == record.tag and kept.database.settings == self.options
                and os.path.exists(os.path.join(path, "CURRENT")))

    def _committed_record(self, group_state: Any) -> Optional[VersionRecord]:
        return committed_version(group_state, self.num_key_groups)

    def save(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any,
             has_timers: bool) -> tuple[bool, int]:
        assert self._call is not None
        path, record, versions = self._call
        changes = self.backend.take_changes()
        self.base_bytes_written = 0
        if record is None and self.backend.is_empty():
            group_state.remove()  # nothing was ever stored for this group
            return False, 0
        new, written = save_version(self.backend, versions, record, changes, batch_id if batch_id is not None else 0,
                                    self.policy, self.retain_batches, path, full_base=self._bootstrapped)
        assert new is not None
        if new.origin != self.origin:
            new = replace(new, origin=self.origin)
        group_state.update(version_row(self.num_key_groups, new))
        self._saved_tag = new.tag
        if new is not record and (record is None or new.base_batch != record.base_batch):
            self.base_bytes_written = written  # the new base, with the changelog that bridges to it
        return True, written

    def finish(self, key_group: int, timer_service: Any, succeeded: bool) -> None:
        call, self._call = self._call, None
        lock, self._lock = self._lock, None
        handle, self._handle = self._handle, None
        timer_service.forget_key_group(key_group)
        try:
            if call is None:
                return
            path = call[0]
            if lock is not None and not self.local.owns(path, lock):  # deleted under the call: never write there
                if handle is not None and self.backend.attached:
                    abandon(self.local, path, self.backend.detach_key_group())
                return
            tag = self._saved_tag if succeeded else None
            if tag is not None and self.open is not None and lock is not None:
                self.backend.start_recording()  # a database opened empty: its whole content is stored already
                database = self.backend.detach_key_group()
                if self.open.keep(path, database, tag, lock, moves_with=task_partition_id()):
                    lock = handle = None  # the kept database holds them
                    return
                database.close()  # another worker process waits for it
            else:
                self.backend.close_key_group()  # flushes: only then does the directory hold what the tag will claim
            if tag is not None:
                self.local.write_tag(path, tag)
            elif succeeded:
                shutil.rmtree(path, ignore_errors=True)  # the group holds nothing and has no row
        finally:
            if self.open is not None:
                self.open.done()
            if handle is not None:
                self.local.drop_handle(handle)
            if lock is not None:
                self.local.release(lock)

    def cleanup_expired_state(self) -> None:
        """Nothing per call: scanning every entry of a large key group each call would cost what the RocksDB mode
        exists to avoid. Expired entries are never returned (reads check the TTL) and are removed from storage when
        the next base snapshot is taken (the backend's ``checkpoint``)."""

    def keys_with_state(self) -> int:
        return self.backend.estimate_keys_with_state()

    def state_bytes(self, saved_bytes: int) -> int:
        """The key group's local database: live SST files and memtables (RocksDB's own accounting)."""
        return self.backend.estimate_state_bytes()


def _moved_message(key_group: int, record: VersionRecord, location: str, uid: str) -> str:
    recorded_uid = last_segment(record.location)
    if recorded_uid != uid:
        what, fix = f"uid={uid!r} but the checkpoint was written with uid={recorded_uid!r}", f"uid={recorded_uid!r}"
    else:
        what, fix = "a different state_storage", "the state_storage it was written with"
    return (f"key group {key_group}'s committed state is in {redact_uri(record.location)}, but keyed_process now "
            f"writes to {location} ({what}); reading one and writing the other would mix two states. Restart with "
            f"{fix}, or start from a new checkpoint location")


def _not_retained(key_group: int, batch_id: Optional[int], versions: KeyGroupVersions, retain_batches: int,
                  error: SnapshotCorruptedError) -> Optional[StateVersionNotRetainedError]:
    """A missing file explained, when later batches than this one already wrote the key group's files: Spark runs
    this batch again from a checkpoint that was rewound (or restored from a backup) past what garbage collection
    retains. Without later files it is damage, and the error stays the one naming the file."""
    newest = versions.newest_batch()
    if batch_id is None or newest is None or newest <= batch_id:
        return None
    return StateVersionNotRetainedError(
        f"key group {key_group} cannot restore the state batch {batch_id} starts from ({error}): batches up to "
        f"{newest} already ran on {versions.storage.location}, and its garbage collection keeps only the files of "
        f"the last minBatchesToRetain ({retain_batches}) batches. The checkpoint was rewound or restored from a "
        f"backup to a batch that is no longer retained: restart from one of the last {retain_batches} batches "
        f"(docs/operations.md, 'Restarting from an older batch'), or restore the state storage from the same "
        f"backup as the checkpoint")


def _close_quietly(database: Any) -> None:
    try:
        database.close()
    except Exception:  # it is rebuilt from storage next; a failing close only means its files are unusable
        logger.warning("closing the stale local state database %s failed", database.path, exc_info=True)
