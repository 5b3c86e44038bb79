"""RocksDB mode (``state_backend="rocksdb"``) on Spark: where an executor keeps the local databases of
:class:`~keyedstate.state.key_groups.versioned.RocksDBKeyGroupStore` (the store and its commit protocol).

A key group's copies are ``<local dir>/<query id>/<uid>/kg-NNNNN``, ``kg-NNNNN.c1``, ...: one per worker process that
runs it, locked while a call or a kept database holds it (:mod:`keyedstate.spark.local_databases`). A call takes the
one this worker keeps open when Spark reuses workers (:mod:`keyedstate.spark.open_databases`, its tag in memory), else
a free one, preferring one whose ``TAG`` file holds the row's tag; one catching up reads the changelogs written on this
machine locally (:mod:`keyedstate.spark.local_changelogs`). A copy whose directory and lock were deleted meanwhile may
be another process's now: it is abandoned, never written. Versions are stored below
``<state_storage>/<query id>/<uid>`` by one run of the query at a time (:mod:`keyedstate.spark.storage_claims`). The
databases a worker keeps open share one block cache and memtable budget
(:class:`~keyedstate.state.rocksdb.options.RocksDBOptions`); at most
:data:`~keyedstate.spark.open_databases.MAX_KEPT_DATABASES` stay open.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import replace
from typing import Any, Optional

from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.locations import last_segment
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import StateStorageConflictError
from keyedstate.redaction import redact_uri, without_credentials
from keyedstate.spark.local_changelogs import LocalChangelogs
from keyedstate.spark.local_databases import LocalDatabases
from keyedstate.spark.open_databases import OpenDatabases, abandon, open_databases_of, worker_reuse_enabled
from keyedstate.spark.query_settings import operator_storage_location
from keyedstate.spark.storage_claims import check_single_writer
from keyedstate.spark_compat import current_query_id, current_run_id, task_partition_id
from keyedstate.state.key_groups.copy_markers import read_tag
from keyedstate.state.key_groups.initial_state import InitialState
from keyedstate.state.key_groups.versioned import LocalCopy, RocksDBKeyGroupStore
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend
from keyedstate.state.rocksdb.options import ARENA_BLOCK_BYTES, RocksDBOptions
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy, VersionRecord

__all__ = ["SparkLocalCopies", "rocksdb_store", "default_local_dir", "default_state_storage"]

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


class SparkLocalCopies:
    """The local databases of one query definition's store in this worker process (see the module docstring)."""

    def __init__(self, num_key_groups: int, *, state_storage: str, storage_options: Optional[StorageOptions],
                 local_dir: Optional[str], uid: str, options: RocksDBOptions, keep_open: Optional[bool],
                 scope: Optional[tuple[str, str]]) -> None:
        self.num_key_groups = num_key_groups
        self.state_storage = state_storage
        self.storage_options = storage_options
        self.uid = uid
        self.options = options
        self.scope = scope
        self._storages: dict[str, CheckpointStorage] = {}
        self.local = LocalDatabases(local_dir or default_local_dir(), lock_timeout_seconds=max(
            300.0, options.lock_timeout_seconds))
        keep_open = worker_reuse_enabled() if keep_open is None else keep_open
        self.open: Optional[OpenDatabases] = open_databases_of(self.local) if keep_open else None
        if self.open is not None:
            self.open.limit_families(options.memtable_budget_bytes, ARENA_BLOCK_BYTES)

    def _query_id(self) -> str:
        return self.scope[0] if self.scope else current_query_id() or _NO_QUERY

    def _storage(self, query_id: str) -> CheckpointStorage:
        storage = self._storages.get(query_id)
        if storage is None:
            location = self.scope[1] if self.scope else operator_storage_location(self.state_storage, query_id,
                                                                                   self.uid)
            storage = self._storages[query_id] = CheckpointStorage(location, options=self.storage_options)
        return storage

    def versions(self, key_group: int, record: Optional[VersionRecord],
                 batch_id: Optional[int]) -> tuple[KeyGroupVersions, KeyGroupVersions]:
        """The query's versions of the key group, refusing a storage another run or setting writes to."""
        query_id = self._query_id()
        storage = self._storage(query_id)
        run_id = current_run_id()
        if run_id is not None and self.scope is None:
            check_single_writer(storage, run_id, batch_id)
        if record is not None and record.location and without_credentials(record.location) != storage.location:
            raise StateStorageConflictError(_moved_message(key_group, record, storage.location, self.uid))
        versions = KeyGroupVersions(storage, key_group, self.num_key_groups, cache=LocalChangelogs(
            self.local.changelogs_path(query_id, self.uid, key_group)))
        return versions, versions

    def acquire(self, key_group: int, record: Optional[VersionRecord], versions: KeyGroupVersions) -> LocalCopy:
        local = self.local
        local.sweep()
        copies = local.copies(self._query_id(), self.uid, key_group)
        counts = local.timer_counts_path(self._query_id(), self.uid, key_group)
        path, kept = self.open.take_first(copies) if self.open is not None else (None, None)
        if kept is not None and path is not None:
            if local.owns(path, kept.lock):
                intact = kept.database.settings == self.options and os.path.exists(os.path.join(path, "CURRENT"))
                return LocalCopy(path, kept.tag, kept.lock, kept.database.path, kept.database, intact, True,
                                 timer_counts=counts)
            abandon(local, path, kept.database)  # deleted under it: not ours any more
            local.release(kept.lock)
        try:
            os.makedirs(os.path.dirname(copies[0]), exist_ok=True)
            path, lock = self._claim_copy(copies, record, versions)
        except BaseException:
            if self.open is not None:
                self.open.done()  # the call holds no copy: finish() has none to release
            raise
        if self.open is not None:
            self.open.use(path)
        return LocalCopy(path, read_tag(path), lock, keepable=self.open is not None, timer_counts=counts)

    def _claim_copy(self, copies: list[str], record: Optional[VersionRecord],
                    versions: KeyGroupVersions) -> tuple[str, int]:
        """Lock a copy of the key group's database no other process holds, preferring one at the committed version,
        then one that can catch up to it; all held: wait for the first (its holder is asked to give it up)."""
        best: Optional[tuple[int, str, int]] = None
        lock: Optional[int] = None
        try:
            for path in copies:
                is_new = not os.path.exists(path + ".lock")
                lock = self.local.try_acquire(path)
                if lock is not None:
                    tag = read_tag(path)
                    score = 0 if record is None or tag is None else 2 if tag == record.tag else int(
                        versions.is_in_chain(record, tag))
                    if best is None or score > best[0]:
                        if best is not None:
                            self.local.release(best[2])
                        best = (score, path, lock)
                    else:
                        self.local.release(lock)
                    lock = None
                    if score == 2:
                        break
                if is_new:
                    break  # copies are made in order: none exists past this one
        except BaseException:  # a lock held past the failed call would keep its copy from every other worker
            for held in (lock, best[2] if best is not None else None):
                if held is not None:
                    self.local.release(held)
            raise
        if best is None:
            return copies[0], self.local.acquire(copies[0])
        return best[1], best[2]

    def discard(self, copy: LocalCopy) -> None:
        _close_quietly(copy.kept)
        self.local.drop_handle(copy.handle)

    def open_path(self, copy: LocalCopy) -> str:
        copy.handle = self.local.handle(copy.path)  # see LocalDatabases.handle and owns()
        return copy.handle

    def owns(self, copy: LocalCopy) -> bool:
        return copy.lock is None or self.local.owns(copy.path, copy.lock)

    def abandon(self, copy: LocalCopy, database: Any) -> None:
        abandon(self.local, copy.path, database)

    def keep(self, copy: LocalCopy, database: Any, tag: str) -> bool:
        assert self.open is not None
        if not self.open.keep(copy.path, database, tag, copy.lock, moves_with=task_partition_id()):
            return False
        copy.lock, copy.handle = None, ""  # the kept database holds them
        return True

    def release(self, copy: LocalCopy) -> None:
        if self.open is not None:
            self.open.done()
        if copy.handle:
            self.local.drop_handle(copy.handle)
        if copy.lock is not None:
            self.local.release(copy.lock)


def rocksdb_store(num_key_groups: int, ttl_clock: Any, *, state_storage: str,
                  storage_options: Optional[StorageOptions] = None, local_dir: Optional[str], uid: str,
                  options: Optional[RocksDBOptions] = None, policy: Optional[SnapshotPolicy] = None,
                  retain_batches: int = 100, keep_open: Optional[bool] = None,
                  initial_state: Optional[InitialState] = None,
                  scope: Optional[tuple[str, str]] = None) -> RocksDBKeyGroupStore:
    """RocksDB mode's store for one worker process and query definition. ``keep_open``: keep databases open between
    calls (default: when Spark reuses the worker). ``scope``: (local directory name, storage location) instead of the
    query's (query id, ``<state_storage>/<query id>/<uid>``): where bootstrap_keyed_state writes."""
    options = replace(options or RocksDBOptions(), reuse_existing=True)
    copies = SparkLocalCopies(num_key_groups, state_storage=state_storage, storage_options=storage_options,
                              local_dir=local_dir, uid=uid, options=options, keep_open=keep_open, scope=scope)
    # The backend needs an open database before any key group is opened (the function's open() registers its
    # states): an empty one of this worker process, never written to afterwards.
    backend = KeyGroupRocksDBBackend(copies.local.idle_path(), num_key_groups=num_key_groups, ttl_clock=ttl_clock,
                                     options=options)
    return RocksDBKeyGroupStore(backend, backend, copies, num_key_groups=num_key_groups, policy=policy,
                                retain_batches=retain_batches, initial_state=initial_state)


def _moved_message(key_group: int, record: VersionRecord, location: str, uid: str) -> str:
    recorded_uid = last_segment(record.location)
    if recorded_uid != uid:
        what, fix = f"uid={uid!r} but the checkpoint was written with uid={recorded_uid!r}", f"uid={recorded_uid!r}"
    else:
        what, fix = "a different state_storage", "the state_storage it was written with"
    return (f"key group {key_group}'s committed state is in {redact_uri(record.location)}, but the query now "
            f"writes to {location} ({what}); reading one and writing the other would mix two states. Restart with "
            f"{fix}, or start from a new checkpoint location")


def _close_quietly(database: Any) -> None:
    try:
        database.close()
    except Exception:  # it is rebuilt from storage next; a failing close only means its files are unusable
        logger.warning("closing the stale local state database %s failed", database.path, exc_info=True)
