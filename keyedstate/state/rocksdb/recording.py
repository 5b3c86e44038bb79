"""What RocksDB mode's store needs of a backend beyond :class:`~keyedstate.state.base.backend.KeyedStateBackend`.

A :class:`RecordingBackend` records its writes, so a key group is saved as the changes since its last version (or a
RocksDB checkpoint, a new base) and restored by replaying them; :class:`KeyGroupDatabases` is one pointed at one key
group's local database per call. The RocksDB backends implement them; the heap backend saves whole rows instead.
"""

from __future__ import annotations

from abc import abstractmethod

from keyedstate.state.base.backend import KeyedStateBackend
from keyedstate.state.rocksdb.changelog import ChangeLog
from keyedstate.state.rocksdb.db import RocksDatabase

__all__ = ["RecordingBackend", "KeyGroupDatabases"]


class RecordingBackend(KeyedStateBackend):
    """A backend whose writes can be taken as a :class:`ChangeLog` and whose database can be checkpointed."""

    @abstractmethod
    def take_changes(self) -> ChangeLog:
        """The writes since the database was opened or the last call."""

    @abstractmethod
    def replay(self, changes: ChangeLog) -> None:
        """Write stored changes into the database (not recorded again: they are stored already)."""

    @abstractmethod
    def is_empty(self) -> bool:
        """Whether no state and no raw column (timers) holds an entry."""

    @abstractmethod
    def checkpoint(self, target: str) -> None:
        """A consistent RocksDB checkpoint of the database in ``target``, expired TTL entries removed first."""


class KeyGroupDatabases(RecordingBackend):
    """A recording backend pointed at one key group's local database at a time (RocksDB mode on Spark)."""

    @abstractmethod
    def open_key_group(self, path: str, record_changes: bool = True) -> None:
        """Open the key group database at ``path`` and bind every state to it."""

    @abstractmethod
    def attach_key_group(self, database: RocksDatabase) -> None:
        """Bind every state to an open key group database an earlier call detached."""

    @abstractmethod
    def detach_key_group(self) -> RocksDatabase:
        """Unbind every state from the current key group database and hand it over, still open."""

    @abstractmethod
    def close_key_group(self) -> None:
        """Flush and close the current key group database."""

    @abstractmethod
    def start_recording(self) -> None:
        """Record the writes of later calls from now on (a key group database opened empty)."""

    @property
    @abstractmethod
    def attached(self) -> bool:
        """Whether a key group's database is bound (between an open or attach and a close or detach)."""

    @abstractmethod
    def estimate_keys_with_state(self) -> int:
        """How many keys hold state, cheaply (for metrics)."""

    @abstractmethod
    def estimate_state_bytes(self) -> int:
        """The bytes the key group's database takes (for metrics); -1 when unknown."""
