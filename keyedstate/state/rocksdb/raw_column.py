"""A RocksDB raw column: an ordered bytes map in its own column family, where the timer service keeps its queues."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from keyedstate.state.base.stores import RawColumn
from keyedstate.state.rocksdb.column_family_store import ColumnFamilyStore
from keyedstate.state.rocksdb.errors import translate

__all__ = ["RocksDBRawColumn"]


class RocksDBRawColumn(ColumnFamilyStore, RawColumn):
    """An ordered bytes map in its own column family (the timer service keeps its queues here).

    The family is created by the first write: most functions use timers of one time domain only, and every column
    family costs time at each open and flush of a key group's database. Until then reads find nothing. Once a
    column was written, a new database of its backend creates its family as it opens (``used``): at the open a
    family costs a fraction of what creating it in an open database does."""

    __slots__ = ("name", "used")

    def __init__(self, backend: Any, family_name: str, name: str) -> None:
        self.name = name
        self.used = False
        super().__init__(backend, family_name, None, name)

    def bind(self, database: Any) -> None:
        self._database = database
        self.entries = self._handle = None
        self._existing()

    @property
    def family_name(self) -> str:
        return self._family_name

    def _existing(self) -> Any:
        """The column family if the database has it (a replayed changelog may have created it), else None."""
        family = self._database.column_families.get(self._family_name)
        if family is not None:
            self.entries = family
            self._handle = self._database.handles[self._family_name]
            self.used = True
        return family

    def _for_write(self) -> Any:
        if self.entries is None and self._existing() is None:
            super().bind(self._database)  # creates the column family
            self.used = True
        return self.entries

    def get(self, key: bytes) -> bytes | None:
        if self.entries is None and self._existing() is None:
            return None
        try:
            return self.entries.get(key)
        except Exception as error:
            raise self._fail(error, "read") from error

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        if self.entries is None and self._existing() is None:
            return [None] * len(keys)
        try:
            return self.entries.get(keys)  # one multi-get
        except Exception as error:
            raise self._fail(error, "read") from error

    def put(self, key: bytes, value: bytes) -> None:
        family = self._for_write()
        try:
            family.put(key, value)
        except Exception as error:
            raise self._fail(error, "write") from error

    def delete(self, key: bytes) -> None:
        if self.entries is None and self._existing() is None:
            return
        try:
            self.entries.delete(key)
        except Exception as error:
            raise self._fail(error, "write") from error

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        if self.entries is None and self._existing() is None:
            return iter(())
        family = self.entries
        iterator = family.items(from_key=start) if start is not None else family.items()
        return _until(iterator, end)

    def delete_range(self, start: bytes, end: bytes) -> None:
        if self.entries is None and self._existing() is None:
            return
        try:
            self.entries.delete_range(start, end)
        except Exception as error:
            raise self._fail(error, "write") from error

    def put_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        pairs = list(pairs)
        if not pairs:
            return
        self._for_write()
        keys, values = zip(*pairs)
        self._database.put_entries(self._family_name, keys, values)

    def _fail(self, error: Exception, action: str) -> Exception:
        return translate(error, f"{action} raw column {self.name!r} of", self._backend.path)


def _until(iterator: Iterator[tuple[bytes, bytes]], end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    for key, value in iterator:
        if end is not None and key >= end:
            return
        yield key, value
