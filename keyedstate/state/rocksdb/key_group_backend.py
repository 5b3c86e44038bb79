"""A RocksDB backend that holds one key group at a time, each in its own local database, recording every write.

The Spark integration runs one key group per call, and the next call of the same key group may come to another
Python worker process (RocksDB allows one process per database). So the backend is pointed at the key group's
database for the call: opened (:meth:`KeyGroupRocksDBBackend.open_key_group`) or taken over already open
(:meth:`attach_key_group`), and at its end either closed (flushed, :meth:`close_key_group`) or detached and kept
open by the caller (:meth:`detach_key_group`). States are registered once (the function's ``open``) and re-bound to
each database; the writes of a call are recorded (:mod:`keyedstate.state.rocksdb.changelog`).
"""

from __future__ import annotations

import os
from typing import Optional

from keyedstate.keygroups import DEFAULT_NUM_KEY_GROUPS
from keyedstate.state.base.backend import TtlClock, system_clock_ms
from keyedstate.state.base.evolution import check_evolution
from keyedstate.state.rocksdb.backend import RocksDBKeyedStateBackend
from keyedstate.state.rocksdb.changelog import ChangeLog
from keyedstate.state.rocksdb.db import STATE_CF_PREFIX, RocksDatabase
from keyedstate.state.rocksdb.options import RocksDBOptions

__all__ = ["KeyGroupRocksDBBackend"]


class KeyGroupRocksDBBackend(RocksDBKeyedStateBackend):
    """Opened on the database at ``path``; :meth:`open_key_group` moves it to another key group's database (a
    :class:`~keyedstate.state.rocksdb.recording.KeyGroupDatabases`)."""

    record_changes = True
    collect_on_close = False  # every store is unbound before the database closes

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        num_key_groups: int = DEFAULT_NUM_KEY_GROUPS,
        ttl_clock: TtlClock = system_clock_ms,
        options: Optional[RocksDBOptions] = None,
    ) -> None:
        super().__init__(path, num_key_groups=num_key_groups, ttl_clock=ttl_clock,
                         options=options or RocksDBOptions(reuse_existing=True))
        self._attached = True
        self._identity = object()  # tells this backend's settled databases from another backend's
        self._settled = False
        """Whether every state of the attached database is settled (metadata checked, migrated, removed states
        dropped) and nothing was replayed into it since."""

    def open_key_group(self, path: str, record_changes: bool = True) -> None:
        """Open the database at ``path`` as it is on disk (the caller prepared it) and bind every state to it.

        Without ``record_changes`` (a database opened empty) :meth:`take_changes` returns the whole content
        instead: cheaper than recording every write when everything is new anyway; value states keep what they
        write in dicts until anything else reads their column families (``RocksDBValueStore.start_bulk``)."""
        if self._attached:
            self.close_key_group()
        self.path = os.path.abspath(path)
        self.record_changes = record_changes
        self._open_database(reuse_existing=True, new=not record_changes)
        self._bound_to_database()
        if not record_changes:
            for store in self._value_stores:
                store.start_bulk()  # the values of a new database: kept in dicts, written once (MemoValueState)

    def attach_key_group(self, database: RocksDatabase) -> None:
        """Bind every state to ``database``, an open database an earlier call detached (recording its writes)."""
        if self._attached:
            self.close_key_group()
        if not database.records_changes:
            raise ValueError("only a database that records its changes can be attached again")
        self.path = database.path
        self.record_changes = True
        self._database = database
        for store in self._stores():
            store.bind(database)
        if database.settled_for is not None and database.settled_for == self._settled_signature():
            # This backend detached it settled, with the same states registered, and nothing wrote to it since
            # (it stayed open and locked here): its metadata is what the last check left.
            self._attached = True
            self._restored_metadata = {}
            self._settled = True
            return
        self._bound_to_database()

    def start_recording(self) -> None:
        """Record the writes of later calls from now on (see :meth:`open_key_group`): lets a database opened empty
        stay open for the next call once this call's content is stored."""
        if not self.record_changes:
            self.write_pending_values()
            self._database.start_recording()
            self.record_changes = True
            for store in self._stores():
                store.bind(self._database)

    @property
    def attached(self) -> bool:
        """Whether a key group's database is bound (between an open or attach and a close or detach)."""
        return self._attached

    def detach_key_group(self) -> RocksDatabase:
        """Unbind every state from the current database and hand it to the caller, still open (and locked)."""
        if not self._attached:
            raise ValueError("no key group database is attached")
        self.write_pending_values()
        for store in self._stores():
            store.unbind(self.path)
        self._attached = False
        self._database.settled_for = (self._settled_signature() if self._settled and not self._restored_metadata
                                      else None)
        return self._database

    def settle_restored_states(self) -> None:
        if self._settled and not self._restored_metadata:
            return  # settled when detached; the cheap path of every call on a database kept open in this worker
        super().settle_restored_states()
        self._settled = True

    def _settled_signature(self) -> tuple:
        return (self._identity, tuple(self._states), tuple(sorted(self.state_incarnations.items())))

    def _bound_to_database(self) -> None:
        self._attached = True
        self._settled = False
        self._restored_metadata = {}
        self.load_metadata_from_database()
        stored = set(self._restored_metadata)
        self._check_registered_against_database()
        # States the database describes keep their stored metadata until settle_restored_states migrated them.
        self._write_metadata([self.metadata_of(r.descriptor) for r in self._states.values() if r.descriptor.name
                              not in stored])

    def close_key_group(self) -> None:
        """Flush and close the attached database (unflushed writes would be lost: the write-ahead log is off)."""
        if self._attached:
            self._close_database()
            self._attached = False

    def close(self) -> None:
        if not self._attached:  # a detached database belongs to whoever keeps it open
            self._closed = True
            return
        super().close()

    def replay(self, changes: ChangeLog) -> None:
        self._settled = False  # the changes may describe states, or state layouts, the database did not hold
        super().replay(changes)
        self._check_registered_against_database()

    def estimate_keys_with_state(self) -> int:
        """RocksDB's estimate of the entries in the state column families (exact counting would scan them all)."""
        self.write_pending_values()
        total = 0
        for name in self._database.family_names(STATE_CF_PREFIX):
            try:
                total += int(self._database.column_families[name].property_int_value("rocksdb.estimate-num-keys") or 0)
            except Exception:  # an estimate for metrics only; rocksdict raises plain Exception
                return -1
        return total

    def estimate_state_bytes(self) -> int:
        """Bytes of the database's live SST files and memtables over every column family (state, timers and
        metadata), from RocksDB's properties; -1 when RocksDB does not say."""
        total = 0
        for family in self._database.column_families.values():
            try:
                total += int(family.property_int_value("rocksdb.live-sst-files-size") or 0)
                total += int(family.property_int_value("rocksdb.cur-size-all-mem-tables") or 0)
            except Exception:  # for metrics only; rocksdict raises plain Exception
                return -1
        return total

    def _check_registered_against_database(self) -> None:
        for name, metadata in list(self._restored_metadata.items()):
            registered = self._states.get(name)
            if registered is not None:
                if not self.is_stale(metadata):
                    check_evolution(metadata, registered.descriptor)
                del self._restored_metadata[name]

    def load_metadata_from_database(self) -> None:
        # registered states too: _check_registered_against_database compares them with their descriptors
        self._restored_metadata.update((metadata.name, metadata) for metadata in self._stored_metadata())
