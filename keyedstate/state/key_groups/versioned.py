"""RocksDB mode's store (format 2, ``state_backend="rocksdb"``): a key group's state and timers live in a local
RocksDB database; a call writes durably only what it changed. Spark runs it and so does the harness, each with its
own :class:`LocalCopies` (where the local databases are and who may use one): Spark's in
:mod:`keyedstate.spark.rocksdb_mode`, the harness's in :mod:`keyedstate.testing.snapshots`.

The commit protocol. Python gets no end-of-task hook, so the key group's committed row (on Spark its state row) stays
the commit record. It carries a :class:`~keyedstate.state.rocksdb.versions.VersionRecord`: the version's tag (unique
per call), the base snapshot it builds on and the changelogs since, in durable storage. A call (:class:`CallStatus`):

1. ``load``: reads the row and takes a local copy of the key group's database from its :class:`LocalCopies`: one
   kept open since an earlier call (its tag in memory), else one on disk, preferably one whose ``TAG`` file holds
   the row's tag. A copy at the row's tag is used as it is; one at an earlier version of the row's chain (the base's
   tag, or the tag of one of its changelogs, or for a few batches after a new base, a version the base's bridge leads
   from: :mod:`~keyedstate.state.rocksdb.version_record`) replays the changelogs after it; any other is rebuilt: base
   downloaded and verified, changelogs replayed. The ``TAG`` file is removed before the database is opened, so a
   process that dies while it has the database open leaves no tag.
2. timers and elements run on the database, which records every write.
3. ``save``: stores the writes as one changelog file, or, when the changelogs since the base grow past the
   :class:`~keyedstate.state.rocksdb.versions.SnapshotPolicy`, a new base snapshot (only SSTs not stored yet are
   uploaded, so a copy that holds few of the stored base's files leaves it to one that does, within the policy's
   wait), and writes the row naming the new version.
4. ``finish``: keeps the database open with the new tag for the key group's next call (when its copies keep it), or
   closes (flushes) it and writes the new ``TAG``; a failed call writes no tag. Only while the copy is still its own:
   if its directory was deleted meanwhile, another process may own the path, and the database is abandoned without
   writing into it.

So correctness never depends on the local database: a retried or duplicate call, a lost machine or a restart all
find either a local database at the committed version (or one it can reach by replaying committed changelogs) or
rebuild the committed version from storage.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Optional, Protocol

from keyedstate.errors import SnapshotCorruptedError, StateBackendError, StateVersionNotRetainedError
from keyedstate.state.base.backend import KeyedStateBackend
from keyedstate.state.base.kinds import ROCKSDB
from keyedstate.state.key_groups.copy_markers import holds_base, mark_base, remove_tag, write_tag
from keyedstate.state.key_groups.initial_state import InitialState, check_origin
from keyedstate.state.key_groups.row_format import STATE_ROW_FORMAT_ROCKSDB, StateRow
from keyedstate.state.key_groups.store import KeyGroupStore, committed_row
from keyedstate.state.key_groups.timer_counts import read_timer_counts, write_timer_counts
from keyedstate.state.rocksdb.changelog import ChangeLog
from keyedstate.state.rocksdb.recording import KeyGroupDatabases, KeyGroupSource
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy, VersionRecord

__all__ = ["RocksDBKeyGroupStore", "CallStatus", "KeyGroupCall", "LocalCopy", "LocalCopies", "committed_version",
           "save_version", "version_row"]

logger = logging.getLogger("keyedstate.spark.rocksdb")

EMPTY_TAG = "(stored nothing)"
"""The tag of a database kept open after a call of a key group without state that stored nothing either (no row,
no version): the next such call takes it as it is, instead of a new database per call (a function that keeps state
for a few keys leaves most key groups without any). Never a version's tag, never written to disk: a holder that
closes such a database deletes it, as a call that stores nothing and closes its database does."""


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
    itself when nothing changed) and the bytes written durably. ``work_path`` is the local database's directory:
    ``work_path`` + a suffix is where a new base's RocksDB checkpoint of ``source`` is made (on the same file
    system, so SSTs are hard links), and the directory is marked as holding the new base
    (:mod:`~keyedstate.state.key_groups.copy_markers`). A copy that holds ``record``'s base writes the next one when
    the policy asks; another waits for one that does, within the policy's wait.

    ``full_base``: the next version is a base of everything that builds on no earlier version (the first version
    written after restoring one from another storage: a bootstrap's, so that no version of the query names a file of
    the bootstrap, or another harness's)."""
    if not changes and not full_base:
        return record, 0
    tag = uuid.uuid4().hex[:16]
    encoded = b"" if full_base else changes.encode()
    key_group = versions.key_group
    wants_base = full_base or policy.wants_base(record, len(encoded), key_group)
    if (wants_base and not full_base and record is not None
            and not policy.must_write_base(record, len(encoded), key_group) and not holds_base(work_path, record)):
        wants_base = versions.should_write_base(record, source.live_sst_files(), batch)  # else a later call's copy
    if wants_base:
        bridge: tuple = ("", ())
        if record is not None and not full_base:  # a local database a few versions behind catches up across the base
            bridge = record.bridge_to_next_base(versions.store_changelog(encoded, batch, tag))
        checkpoint = f"{work_path}.base-{tag}"
        try:
            source.checkpoint(checkpoint)
            new, written = versions.write_base(None if full_base else record, checkpoint, batch, tag,
                                               source.state_metadata(), source.raw_column_names(), retain_batches,
                                               bridge)
            mark_base(work_path, new)
            return new, written + (bridge[1][-1].size if bridge[1] else 0)
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
    new = versions.write_changelog(record, encoded, batch, tag)
    return new, new.changelogs[-1].size


class CallStatus(Enum):
    """How far a key group's call got; each step of the store checks that it runs in order."""

    LOADING = "loading"  # load() runs: the call may hold a copy of the database, at no committed version yet
    LOADED = "loaded"  # the backend is bound to the key group's database at the committed version
    SAVED = "saved"  # save() stored the call's writes as a version (tag) and wrote the row naming it
    FAILED = "failed"  # load() or save() raised: finish() keeps nothing of the database


_NEXT = {CallStatus.LOADING: (CallStatus.LOADED, CallStatus.FAILED),
         CallStatus.LOADED: (CallStatus.SAVED, CallStatus.FAILED), CallStatus.SAVED: (), CallStatus.FAILED: ()}


@dataclass
class LocalCopy:
    """A copy of a key group's local database, held by one call from its :class:`LocalCopies`."""

    path: str  # its directory
    tag: Optional[str] = None  # the committed version it holds, as far as known
    lock: Any = None  # what the copies hold it by, until the call ends
    handle: str = ""  # the path the open database was opened with
    kept: Any = None  # the database, when it was kept open since an earlier call (detached, recording)
    intact: bool = True  # a kept database opened with the store's options, its directory still there
    keepable: bool = False  # the call may end by keeping the database open for the next
    timer_counts: str = ""  # the key group's timer-counts file, shared by its copies (:mod:`.timer_counts`); "": none


class LocalCopies(Protocol):
    """Where a store's local databases are and who may use one. ``versions``: those the call writes, and those the
    committed record is read from (another storage's: the next version is then a full base), refusing a storage the
    call may not write to. ``acquire``: a copy for the call, kept open since an earlier call or on disk (preferably
    at the record's version); ``discard`` closes a kept one that cannot serve the call. ``open_path``: the path to
    open it with (sets ``handle``). ``owns``: the copy is still the call's (its directory was not deleted and taken
    by another process); ``abandon`` closes the database of one that is not, without writing into it. ``keep``: keep
    the detached database open at version ``tag`` for a later call (False: the caller closes it). ``release``: the
    call ended; give the copy up, unless kept."""

    def versions(self, key_group: int, record: Optional[VersionRecord],
                 batch_id: Optional[int]) -> tuple[KeyGroupVersions, KeyGroupVersions]: ...
    def acquire(self, key_group: int, record: Optional[VersionRecord], versions: KeyGroupVersions) -> LocalCopy: ...
    def discard(self, copy: LocalCopy) -> None: ...
    def open_path(self, copy: LocalCopy) -> str: ...
    def owns(self, copy: LocalCopy) -> bool: ...
    def abandon(self, copy: LocalCopy, database: Any) -> None: ...
    def keep(self, copy: LocalCopy, database: Any, tag: str) -> bool: ...
    def release(self, copy: LocalCopy) -> None: ...


@dataclass
class KeyGroupCall:
    """One call of a key group: the version it starts from, the local copy it holds, and its status."""

    key_group: int
    record: Optional[VersionRecord] = None  # the committed version (None: the group has no state yet)
    bootstrapped: bool = False  # record is the initial state's version, not one the query committed
    versions: Any = None  # the KeyGroupVersions the call writes
    source: Any = None  # the KeyGroupVersions the record is read from (another one: a full base is written next)
    copy: Optional[LocalCopy] = None  # the local database, once the call holds one
    tag: Optional[str] = None  # the version save() wrote (None: save removed the row)
    status: CallStatus = CallStatus.LOADING

    def advance(self, status: CallStatus) -> None:
        if status not in _NEXT[self.status]:
            raise StateBackendError(f"key group {self.key_group}'s call is {self.status.value}: it cannot become "
                                    f"{status.value}")
        self.status = status


class RocksDBKeyGroupStore(KeyGroupStore):
    """Points ``databases`` at one key group's local database per call, taken from ``copies``; ``backend`` is what
    the call's state lives in (on Spark the same object; in the harness, the database ``databases`` views)."""

    def __init__(self, backend: KeyedStateBackend, databases: KeyGroupDatabases, copies: LocalCopies, *,
                 num_key_groups: int, policy: Optional[SnapshotPolicy] = None, retain_batches: int = 100,
                 initial_state: Optional[InitialState] = None) -> None:
        self.backend = backend
        self.databases = databases
        self.copies = copies
        self.num_key_groups = num_key_groups
        self.policy = policy or SnapshotPolicy()
        self.retain_batches = retain_batches
        self.initial_state = initial_state
        self.origin = initial_state.bootstrap_id if initial_state is not None else ""
        self.call: Optional[KeyGroupCall] = None
        """The key group's call between load() and finish(); None between calls."""

    def load(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any) -> None:
        if self.call is not None:
            raise StateBackendError(f"key group {key_group}'s call starts before key group {self.call.key_group}'s "
                                    f"finished")
        call = self.call = KeyGroupCall(key_group)
        try:
            self._read_committed(call, group_state)
            call.versions, call.source = self.copies.versions(key_group, None if call.bootstrapped else call.record,
                                                              batch_id)
            if call.bootstrapped:
                assert self.initial_state is not None
                call.source = KeyGroupVersions(self.initial_state.storage(), key_group, self.num_key_groups)
            call.copy = self.copies.acquire(key_group, call.record, call.versions)
            if not self._attach_kept(call, call.copy, batch_id):
                self._open_local(call, call.copy, batch_id)
            if timer_service is not None:  # None: the caller keeps the key group's timers (the harness)
                known = (0, 0) if call.record is None else read_timer_counts(call.copy.timer_counts,
                                                                             call.record.tag)
                timer_service.reload_key_group(key_group, known, new=call.record is None)
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

    def _attach_kept(self, call: KeyGroupCall, copy: LocalCopy, batch_id: Optional[int]) -> bool:
        """Bind the backend to a database kept open since an earlier call, when it holds the committed version or
        catches up to it; one that cannot is closed (the call rebuilds the copy)."""
        if copy.kept is None:
            return False
        missed: Optional[list] = None
        if copy.intact:
            if call.record is None:
                missed = [] if copy.tag == EMPTY_TAG else None
            else:
                current = copy.tag == call.record.tag
                missed = [] if current else self._missed_changelogs(call, copy.tag, batch_id)
        if missed is None:
            self.copies.discard(copy)  # a failed attempt's writes, or a version that was not committed
            copy.kept, copy.tag, copy.handle = None, None, ""
            return False
        self.databases.attach_key_group(copy.kept)
        self._catch_up(call, missed, batch_id)
        return True

    def _open_local(self, call: KeyGroupCall, copy: LocalCopy, batch_id: Optional[int]) -> None:
        """Open the copy on disk at the committed version: as it is, caught up by the changelogs it missed, or
        rebuilt from storage."""
        record = call.record
        missed: Optional[list] = None
        changelogs: list = []
        if record is None:
            shutil.rmtree(copy.path, ignore_errors=True)
        elif copy.tag != record.tag:
            missed = self._missed_changelogs(call, copy.tag, batch_id)
            if missed is None:
                changelogs = self._rebuild(call, copy, batch_id)
        os.makedirs(copy.path, exist_ok=True)
        remove_tag(copy.path)  # from here until finish() the database may differ from every committed version
        self.databases.open_key_group(self.copies.open_path(copy), record_changes=record is not None)
        self._catch_up(call, missed or [], batch_id)
        for changelog in changelogs:
            self.databases.replay(changelog)

    def _rebuild(self, call: KeyGroupCall, copy: LocalCopy, batch_id: Optional[int]) -> list:
        """Download the committed version's base into the copy's directory; returns the changelogs to replay."""
        record, source = call.record, call.source
        assert record is not None
        logger.info("key group %d, batch %s: rebuilding the local state from %s (base batch %s + %d changelogs)",
                    call.key_group, batch_id, source.storage.location, record.base_batch, len(record.changelogs))
        try:
            changelogs = source.restore(record, copy.path)
        except SnapshotCorruptedError as error:
            _raise_if_not_retained(call.key_group, batch_id, source, self.retain_batches, error)
            raise
        if source is call.versions:
            mark_base(copy.path, record)
        return changelogs

    def _missed_changelogs(self, call: KeyGroupCall, tag: Optional[str], batch_id: Optional[int]) -> Optional[list]:
        """The changelogs that bring a copy at version ``tag`` to the committed one, or None (it is rebuilt)."""
        if call.record is None or call.source is not call.versions:
            return None
        try:
            return call.versions.changelogs_after(call.record, tag)
        except SnapshotCorruptedError as error:
            _raise_if_not_retained(call.key_group, batch_id, call.versions, self.retain_batches, error)
            raise

    def _catch_up(self, call: KeyGroupCall, missed: list, batch_id: Optional[int]) -> None:
        if missed:
            logger.debug("key group %d, batch %s: %s catches up by %d changelogs", call.key_group, batch_id,
                         call.copy.path if call.copy else "", len(missed))
        for changelog in missed:
            self.databases.replay(changelog)

    def save(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any,
             has_timers: bool) -> tuple[bool, int]:
        call = self.call
        if call is None or call.copy is None or call.status is not CallStatus.LOADED:
            raise StateBackendError(f"key group {key_group} is saved before it was loaded")
        try:
            record = call.record
            changes = self.databases.take_changes()
            self.base_bytes_written = 0
            if record is None and self.databases.is_empty():
                group_state.remove()  # nothing was ever stored for this group
                call.advance(CallStatus.SAVED)
                return False, 0
            new, written = save_version(self.databases, call.versions, record, changes,
                                        batch_id if batch_id is not None else 0, self.policy, self.retain_batches,
                                        call.copy.path, full_base=call.source is not call.versions)
            assert new is not None
            if new.origin != self.origin:
                new = replace(new, origin=self.origin)
            group_state.update(version_row(self.num_key_groups, new))
        except BaseException:
            call.advance(CallStatus.FAILED)
            raise
        call.tag = new.tag
        call.advance(CallStatus.SAVED)
        if new is not record and (record is None or new.base_batch != record.base_batch):
            self.base_bytes_written = written  # the new base, with the changelog that bridges to it
        return True, written

    def finish(self, key_group: int, timer_service: Any, succeeded: bool) -> None:
        call, self.call = self.call, None
        counts = None
        if timer_service is not None:
            counts = timer_service.counted_timers(key_group)
            timer_service.forget_key_group(key_group)
        if call is None or call.copy is None:  # load failed before the call held a database
            return
        copy = call.copy
        try:
            if not self.copies.owns(copy):  # deleted under the call: never write there
                if copy.handle and self.databases.attached:
                    self.copies.abandon(copy, self.databases.detach_key_group())
                return
            saved = succeeded and call.status is CallStatus.SAVED
            tag = call.tag if saved else None
            if tag is not None and counts is not None and copy.timer_counts:
                write_timer_counts(copy.timer_counts, tag, counts)
            kept_tag = tag if tag is not None else EMPTY_TAG if saved else None
            if kept_tag is not None and copy.keepable:
                self.databases.start_recording()  # a database opened empty: its whole content is stored already
                database = self.databases.detach_key_group()
                if self.copies.keep(copy, database, kept_tag):
                    return
                database.close()  # another process waits for it
            else:
                self.databases.close_key_group()  # flushes: only then does the directory hold what the tag will claim
            if tag is not None:
                write_tag(copy.path, tag)
            elif saved:
                shutil.rmtree(copy.path, ignore_errors=True)  # the group holds nothing and has no row
        finally:
            self.copies.release(copy)

    def cleanup_expired_state(self) -> None:
        """Nothing per call: scanning every entry of a large key group each call would cost what the RocksDB mode
        exists to avoid. Expired entries are never returned (reads check the TTL) and are removed from storage when
        the next base snapshot is taken (the backend's ``checkpoint``)."""

    def keys_with_state(self) -> int:
        return self.databases.estimate_keys_with_state()

    def state_bytes(self, saved_bytes: int) -> int:
        """The key group's local database: live SST files and memtables (RocksDB's own accounting)."""
        return self.databases.estimate_state_bytes()


def _raise_if_not_retained(key_group: int, batch_id: Optional[int], versions: KeyGroupVersions, retain_batches: int,
                           error: SnapshotCorruptedError) -> None:
    """Explain a missing file, when later batches than this one already wrote the key group's files: Spark runs
    this batch again from a checkpoint that was rewound (or restored from a backup) past what garbage collection
    retains. Without later files it is damage, and the caller re-raises the error naming the file."""
    newest = versions.newest_batch()
    if batch_id is None or newest is None or newest <= batch_id:
        return
    raise StateVersionNotRetainedError(
        f"key group {key_group} cannot restore the state batch {batch_id} starts from ({error}): batches up to "
        f"{newest} already ran on {versions.storage.location}, and its garbage collection keeps only the files of "
        f"the last minBatchesToRetain ({retain_batches}) batches. The checkpoint was rewound or restored from a "
        f"backup to a batch that is no longer retained: restart from one of the last {retain_batches} batches "
        f"(docs/operations.md, 'Restarting from an older batch'), or restore the state storage from the same "
        f"backup as the checkpoint") from error
