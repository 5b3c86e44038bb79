"""What every RocksDB store shares: its column family of the open database, the current key's prefix, and errors
that name the state and the database.

Stores keep keys in the shared layout (:mod:`keyedstate.state.base.layout`). Hot-path methods do the least possible
work: concatenate the backend's current prefix with the namespace, one rocksdict call, one codec call. ``try``
blocks are free in CPython 3.11 unless they catch.
"""

from __future__ import annotations

from typing import Any

from keyedstate.errors import StateBackendError
from keyedstate.state.base.layout import EntryCodec, last_access_ms, prefix_successor
from keyedstate.state.rocksdb.errors import translate

__all__ = ["ColumnFamilyStore", "ClosedColumnFamily"]


class ClosedColumnFamily:
    """Stands in for a column family after ``close()`` so late access fails with a clear error."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __getattr__(self, name: str) -> Any:
        raise StateBackendError(f"the RocksDB keyed state backend at {self._path} is closed; state cannot be used "
                                f"after close()")


class ColumnFamilyStore:
    """Base of the RocksDB stores: one column family per state (or raw column), ``entries``, of the open database."""

    __slots__ = ("_backend", "_database", "entries", "_handle", "_family_name", "_serialize", "_deserialize", "_name")

    def __init__(self, backend: Any, family_name: str, codec: EntryCodec | None, name: str) -> None:
        self._backend = backend
        self._family_name = family_name
        self._name = name
        if codec is not None:
            # Without TTL an entry is the bare value: bind the value codec directly (one call less per access).
            self._serialize = codec.serialize_entry if codec.has_ttl else codec.serialize_value
            self._deserialize = codec.deserialize_entry if codec.has_ttl else codec.deserialize_value
        self.bind(backend.database)

    def bind(self, database: Any) -> None:
        """(Re)attach to the open database (after open or restore)."""
        self._database = database
        self.entries = database.column_family(self._family_name)
        self._handle = database.handles[self._family_name]

    def unbind(self, path: str) -> None:
        self._database = None
        self.entries = ClosedColumnFamily(path)
        self._handle = None

    def _prefix(self, namespace: bytes) -> bytes:
        try:
            return self._backend.key_prefix + namespace
        except TypeError:
            self._backend.get_current_key()  # raises NoKeyContextError
            raise

    def _fail(self, error: Exception, action: str) -> Exception:
        return translate(error, f"{action} state {self._name!r}", self._backend.path)

    def remove_expired(self, expired_at_or_before: int, batch_size: int) -> int:
        """Delete the TTL entries last accessed at or before ``expired_at_or_before``, in
        write batches of ``batch_size``; returns how many."""
        database = self._database
        batch = database.new_batch()
        removed = 0
        try:
            for key, data in self.entries.items():
                if last_access_ms(data) <= expired_at_or_before:
                    batch.delete(key, self._handle)
                    removed += 1
                    if len(batch) >= batch_size:
                        database.write(batch)
                        batch = database.new_batch()
            if len(batch):
                database.write(batch)
        except Exception as error:
            raise self._fail(error, "clean up expired entries of") from error
        return removed

    def _delete_prefix(self, prefix: bytes) -> None:
        try:
            self.entries.delete_range(prefix, prefix_successor(prefix))
        except Exception as error:
            raise self._fail(error, "clear") from error
