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
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Optional

from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.locations import last_segment
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import (
    SnapshotCorruptedError,
    StateBackendError,
    StateStorageConflictError,
    StateVersionNotRetainedError,
)
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

__all__ = ["RocksDBKeyGroupStore", "KeyGroupCall", "CallStatus", "default_local_dir", "default_state_storage"]

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


class CallStatus(Enum):
    """How far a key group's call got; each step of the store checks that it runs in order."""

    LOADING = "loading"  # load() runs: the call may hold a copy of the database, at no committed version yet
    LOADED = "loaded"  # the backend is bound to the key group's database at the committed version
    SAVED = "saved"  # save() stored the call's writes as a version (tag) and wrote the row naming it
    FAILED = "failed"  # load() or save() raised: finish() keeps nothing of the database


_NEXT = {CallStatus.LOADING: (CallStatus.LOADED, CallStatus.FAILED),
         CallStatus.LOADED: (CallStatus.SAVED, CallStatus.FAILED), CallStatus.SAVED: (), CallStatus.FAILED: ()}


@dataclass
class KeyGroupCall:
    """One call of a key group: the version it starts from, the local database it holds, and its status."""

    key_group: int
    record: Optional[VersionRecord] = None  # the committed version (None: the group has no state yet)
    bootstrapped: bool = False  # record is the initial state's version, not one the query committed
    versions: Any = None  # the KeyGroupVersions the call writes, and reads unless bootstrapped
    path: str = ""  # the local database's directory, once the call holds one
    lock: Optional[int] = None  # its lock, released by finish()
    handle: str = ""  # the path the database was opened with
    tag: Optional[str] = None  # the version save() wrote (None: save removed the row)
    status: CallStatus = CallStatus.LOADING

    def advance(self, status: CallStatus) -> None:
        if status not in _NEXT[self.status]:
            raise StateBackendError(f"key group {self.key_group}'s call is {self.status.value}: it cannot become "
                                    f"{status.value}")
        self.status = status


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
        # The backend needs an open database before any key group is opened (the function's open() registers its
        # states): an empty one of this worker process, never written to afterwards.
        self.backend: KeyGroupDatabases = KeyGroupRocksDBBackend(
            self.local.idle_path(), num_key_groups=num_key_groups, ttl_clock=ttl_clock, options=options)
        self.call: Optional[KeyGroupCall] = None
        """The key group's call between load() and finish(); None between calls."""

    def _storage(self, query_id: str) -> CheckpointStorage:
        storage = self._storages.get(query_id)
        if storage is None:
            location = self.scope[1] if self.scope else operator_storage_location(self.state_storage, query_id,
                                                                                   self.uid)
            storage = self._storages[query_id] = CheckpointStorage(location, options=self.storage_options)
        return storage

    def load(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any) -> None:
        if self.call is not None:
            raise StateBackendError(f"key group {key_group}'s call starts before key group {self.call.key_group}'s "
                                    f"finished")
        call = self.call = KeyGroupCall(key_group)
        try:
            self._read_committed(call, group_state)
            query_id = self._find_versions(call, batch_id)
            if not self._attach_kept(call, query_id, batch_id):
                self._open_local(call, query_id, batch_id)
            timer_service.reload_key_group(key_group)
        except BaseException:
            call.advance(CallStatus.FAILED)
            raise
        call.advance(CallStatus.LOADED)

    def _read_committed(self, call: KeyGroupCall, group_state: Any) -> None:
        """The version the call starts from: the committed row's, else the initial state's."""
        call.record = committed_version(group_state, self.num_key_groups)
        if call.record is not None:
            check_origin(call.key_group, call.record.origin or None, self.initial_state)
        elif self.initial_state is not None and self.initial_state.holds(call.key_group):
            row = self.initial_state.row(call.key_group)
            assert row is not None
            call.record, call.bootstrapped = VersionRecord.from_bytes(row.state), True

    def _find_versions(self, call: KeyGroupCall, batch_id: Optional[int]) -> str:
        """The key group's versions in this query's storage, refusing a storage another run or setting writes."""
        query_id = self.scope[0] if self.scope else current_query_id() or _NO_QUERY
        storage = self._storage(query_id)
        run_id = current_run_id()
        if run_id is not None and self.scope is None:
            check_single_writer(storage, run_id, batch_id)
        record = call.record
        if (record is not None and record.location and without_credentials(record.location) != storage.location
                and not call.bootstrapped):
            raise StateStorageConflictError(_moved_message(call.key_group, record, storage.location, self.uid))
        call.versions = KeyGroupVersions(storage, call.key_group, self.num_key_groups, cache=LocalChangelogs(
            self.local.changelogs_path(query_id, self.uid, call.key_group)))
        return query_id

    def _attach_kept(self, call: KeyGroupCall, query_id: str, batch_id: Optional[int]) -> bool:
        """Bind the backend to a copy of the key group's database this process keeps open, when it holds the
        committed version or catches up to it; a kept copy that cannot stays the call's (closed, to be rebuilt)."""
        local = self.local
        local.sweep()
        copies = local.copies(query_id, self.uid, call.key_group)
        path, kept = self.open.take_first(copies) if self.open is not None else (None, None)
        if kept is None or path is None:
            return False
        if not local.owns(path, kept.lock):  # deleted under it: not ours any more
            abandon(local, path, kept.database)
            local.release(kept.lock)
            return False
        call.path, call.lock = path, kept.lock  # released in finish(), which the group function always calls
        record = call.record
        missed: Optional[list] = None
        if (record is not None and kept.tag == record.tag and kept.database.settings == self.options
                and os.path.exists(os.path.join(path, "CURRENT"))):
            missed = []  # still current (and its directory was not removed under it)
        elif kept.database.settings == self.options and os.path.exists(os.path.join(path, "CURRENT")):
            missed = self._missed_changelogs(call, kept.tag, batch_id)
        if missed is None:
            _close_quietly(kept.database)  # a failed attempt's writes, or a version Spark did not commit
            local.drop_handle(kept.database.path)
            return False
        self.backend.attach_key_group(kept.database)
        call.handle = kept.database.path
        self._catch_up(call, missed, batch_id)
        return True

    def _open_local(self, call: KeyGroupCall, query_id: str, batch_id: Optional[int]) -> None:
        """Open a copy of the key group's database on disk at the committed version: as it is, caught up by the
        changelogs it missed, or rebuilt from storage."""
        local, record = self.local, call.record
        tag = None  # a kept copy that could not serve the call is rebuilt
        if not call.path:
            copies = local.copies(query_id, self.uid, call.key_group)
            os.makedirs(os.path.dirname(copies[0]), exist_ok=True)
            call.path, call.lock = self._claim_copy(copies, record, call.versions)
            if self.open is not None:
                self.open.use(call.path)
            tag = local.read_tag(call.path)
        missed: Optional[list] = None
        changelogs: list = []
        if record is None:
            shutil.rmtree(call.path, ignore_errors=True)
        elif tag != record.tag:
            missed = self._missed_changelogs(call, tag, batch_id)
            if missed is None:
                changelogs = self._rebuild(call, batch_id)
        os.makedirs(call.path, exist_ok=True)
        local.remove_tag(call.path)  # from here until finish() the database may differ from every committed version
        # opened through a handle of this process: see LocalDatabases.handle and finish()
        call.handle = local.handle(call.path)
        self.backend.open_key_group(call.handle, record_changes=record is not None)
        self._catch_up(call, missed or [], batch_id)
        for changelog in changelogs:
            self.backend.replay(changelog)

    def _rebuild(self, call: KeyGroupCall, batch_id: Optional[int]) -> list:
        """Download the committed version's base into the call's directory; returns the changelogs to replay."""
        record, source = call.record, call.versions
        assert record is not None
        if call.bootstrapped:
            assert self.initial_state is not None
            source = KeyGroupVersions(self.initial_state.storage(), call.key_group, self.num_key_groups)
        logger.info("key group %d, batch %s: rebuilding the local state from %s (base batch %s + %d changelogs)",
                    call.key_group, batch_id, source.storage.location, record.base_batch, len(record.changelogs))
        try:
            return source.restore(record, call.path)
        except SnapshotCorruptedError as error:
            explained = _not_retained(call.key_group, batch_id, source, self.retain_batches, error)
            if explained is None:
                raise
            raise explained from error

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

    def _missed_changelogs(self, call: KeyGroupCall, tag: Optional[str], batch_id: Optional[int]) -> Optional[list]:
        """The changelogs that bring a copy at version ``tag`` to the committed one, or None (it is rebuilt)."""
        if call.record is None or call.bootstrapped:
            return None
        try:
            return call.versions.changelogs_after(call.record, tag)
        except SnapshotCorruptedError as error:
            explained = _not_retained(call.key_group, batch_id, call.versions, self.retain_batches, error)
            if explained is None:
                raise
            raise explained from error

    def _catch_up(self, call: KeyGroupCall, missed: list, batch_id: Optional[int]) -> None:
        if missed:
            logger.debug("key group %d, batch %s: %s catches up by %d changelogs", call.key_group, batch_id,
                         call.path, len(missed))
        for changelog in missed:
            self.backend.replay(changelog)

    def save(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any,
             has_timers: bool) -> tuple[bool, int]:
        call = self.call
        if call is None or call.status is not CallStatus.LOADED:
            raise StateBackendError(f"key group {key_group} is saved before it was loaded")
        try:
            kept, written = self._store_version(call, group_state, batch_id)
        except BaseException:
            call.advance(CallStatus.FAILED)
            raise
        call.advance(CallStatus.SAVED)
        return kept, written

    def _store_version(self, call: KeyGroupCall, group_state: Any, batch_id: Optional[int]) -> tuple[bool, int]:
        record = call.record
        changes = self.backend.take_changes()
        self.base_bytes_written = 0
        if record is None and self.backend.is_empty():
            group_state.remove()  # nothing was ever stored for this group
            return False, 0
        new, written = save_version(self.backend, call.versions, record, changes,
                                    batch_id if batch_id is not None else 0, self.policy, self.retain_batches,
                                    call.path, full_base=call.bootstrapped)
        assert new is not None
        if new.origin != self.origin:
            new = replace(new, origin=self.origin)
        group_state.update(version_row(self.num_key_groups, new))
        call.tag = new.tag
        if new is not record and (record is None or new.base_batch != record.base_batch):
            self.base_bytes_written = written  # the new base, with the changelog that bridges to it
        return True, written

    def finish(self, key_group: int, timer_service: Any, succeeded: bool) -> None:
        call, self.call = self.call, None
        timer_service.forget_key_group(key_group)
        if call is None or not call.path:  # load failed before the call held a database
            return
        lock, handle = call.lock, call.handle
        try:
            if lock is not None and not self.local.owns(call.path, lock):  # deleted under the call: never write there
                if handle and self.backend.attached:
                    abandon(self.local, call.path, self.backend.detach_key_group())
                return
            saved = succeeded and call.status is CallStatus.SAVED
            tag = call.tag if saved else None
            if tag is not None and self.open is not None and lock is not None:
                self.backend.start_recording()  # a database opened empty: its whole content is stored already
                database = self.backend.detach_key_group()
                if self.open.keep(call.path, database, tag, lock, moves_with=task_partition_id()):
                    lock, handle = None, ""  # the kept database holds them
                    return
                database.close()  # another worker process waits for it
            else:
                self.backend.close_key_group()  # flushes: only then does the directory hold what the tag will claim
            if tag is not None:
                self.local.write_tag(call.path, tag)
            elif saved:
                shutil.rmtree(call.path, ignore_errors=True)  # the group holds nothing and has no row
        finally:
            if self.open is not None:
                self.open.done()
            if handle:
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
