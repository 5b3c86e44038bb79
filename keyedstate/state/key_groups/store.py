"""The one save/restore step of a key group, shared by Spark's two state modes and the test harnesses.

A key group's state is saved as one *committed row* (:class:`~keyedstate.state.key_groups.row_format.StateRow`)
kept by a holder with Spark's ``GroupState`` surface (``exists``, ``get``, ``update``, ``remove``): on Spark the
key group's state row, in the harness a :class:`~keyedstate.state.key_groups.memory_group_state.MemoryGroupState`
held by the snapshot. A key-group call of the Spark group function runs: ``store.load`` (state and timers of the
group ready in ``store.backend``) -> timers and elements -> ``store.save`` (writes the row, the commit record) ->
Spark's timeout is set -> ``store.finish`` (always, also after a failure). Two kinds of record exist:

* format 1, :class:`keyedstate.state.key_groups.row_store.RowKeyGroupStore` (``state_backend="heap"``): the row
  carries the whole state and timers of the group.
* format 2, :class:`keyedstate.state.key_groups.versioned.RocksDBKeyGroupStore` (``state_backend="rocksdb"``): the
  state lives in RocksDB; the row carries a small version record naming durable files (a base snapshot and
  changelogs). Spark and the harness run the same store: Spark on one local database per key group
  (:mod:`keyedstate.spark.rocksdb_mode`), the harness on its one database seen one key group at a time
  (:class:`keyedstate.testing.snapshots.HarnessRocksDBStore`).

This package imports neither pyspark nor anything of :mod:`keyedstate.spark` (Spark imports it, never the reverse).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Optional

from keyedstate.errors import ConfigurationError
from keyedstate.state.base.backend import KeyedStateBackend
from keyedstate.state.base.kinds import HEAP, ROCKSDB
from keyedstate.state.key_groups.row_format import STATE_ROW_FORMAT_FULL, STATE_ROW_FORMAT_ROCKSDB, StateRow

__all__ = ["KeyGroupStore", "check_recorded_key_groups", "committed_row"]

_BACKEND_OF_FORMAT = {STATE_ROW_FORMAT_FULL: HEAP, STATE_ROW_FORMAT_ROCKSDB: ROCKSDB}


class KeyGroupStore(ABC):
    """Loads a key group's state into :attr:`backend` and saves it into the group's committed row.

    Row mode's store calls what :class:`KeyedStateBackend` declares; RocksDB mode's also what a
    :class:`~keyedstate.state.rocksdb.recording.KeyGroupDatabases` backend does (recorded changes, one local database
    per key group)."""

    backend: KeyedStateBackend

    @abstractmethod
    def load(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any) -> None:
        """Make the state and timers of ``key_group`` as of the group's committed row current."""

    @abstractmethod
    def save(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any,
             has_timers: bool) -> tuple[bool, int]:
        """Write the row (or remove it when the group holds nothing); returns (row kept, bytes written durably)."""

    @abstractmethod
    def finish(self, key_group: int, timer_service: Any, succeeded: bool) -> None:
        """End of the call, after Spark's timeout was set: release what the call held."""

    @abstractmethod
    def keys_with_state(self) -> int:
        """Keys holding state in the current key group (for metrics; RocksDB mode: RocksDB's estimate)."""

    def cleanup_expired_state(self) -> None:
        """At the end of a call, before :meth:`save`: delete the expired TTL entries of the key group."""
        self.backend.cleanup_expired_state()

    base_bytes_written = 0
    """Of the bytes the last :meth:`save` wrote, those of a new base snapshot (RocksDB mode; for metrics)."""

    def state_bytes(self, saved_bytes: int) -> int:
        """The current key group's state size after a :meth:`save` that wrote ``saved_bytes`` (for metrics): the
        row itself where the row holds the state."""
        return saved_bytes


def check_recorded_key_groups(row: StateRow, num_key_groups: int) -> None:
    if row.key_groups != num_key_groups:
        raise ConfigurationError(
            f"the query's checkpoint was written with num_key_groups={row.key_groups} but keyed_process now runs "
            f"with num_key_groups={num_key_groups}; the number of key groups cannot change while the "
            f"checkpoint lives. Restart with num_key_groups={row.key_groups}, or use a new checkpoint location"
        )


def committed_row(group_state: Any, num_key_groups: int, state_backend: str) -> Optional[StateRow]:
    """The group's committed row (None before the first), refused when another keyed_process setup wrote it."""
    if not group_state.exists:
        return None
    row = StateRow.from_row(group_state.get)
    check_recorded_key_groups(row, num_key_groups)
    written_by = _BACKEND_OF_FORMAT.get(row.format)
    if written_by is None:
        raise ConfigurationError(
            f"the state row has format {row.format}, which this keyedstate version cannot read (it reads "
            f"{', '.join(map(str, sorted(_BACKEND_OF_FORMAT)))}); upgrade keyedstate"
        )
    if written_by != state_backend:
        raise ConfigurationError(
            f"the query's checkpoint was written with state_backend={written_by!r} but keyed_process now runs with "
            f"state_backend={state_backend!r}; the state backend cannot change while the checkpoint lives. Restart "
            f"with state_backend={written_by!r}, or use a new checkpoint location"
        )
    return row
