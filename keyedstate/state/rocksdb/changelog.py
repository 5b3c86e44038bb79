"""What one unit of work wrote to a RocksDB database, recorded as it is written, so it can be stored as a small
changelog and replayed on top of an older snapshot.

Every write of the backend goes through a column family object or a write batch that :class:`RocksDatabase`
hands out; while recording, those are :class:`RecordingFamily` / :class:`RecordingBatch`, which write to RocksDB
and append the same operation to the database's list of operations. Replaying the operations in order on a database
that held the state before the writes gives the state after them.

Encoding (versioned, msgpack): ``[1, [family names], [op, family index, key, value-or-end, ...]]``. Only the last
point operation (put or delete) of each key is encoded: a key's final value is its last point operation followed by
any later range delete, and both stay in order, so the earlier ones change nothing (a key updated for every element
of a batch costs one entry).
"""

from __future__ import annotations

from itertools import chain, repeat
from typing import Any, Optional, Sequence

import msgpack

from keyedstate.errors import SnapshotCorruptedError
from keyedstate.fastpath import fastpath

__all__ = ["ChangeLog", "RecordingFamily", "RecordingBatch", "PUT", "DELETE", "DELETE_RANGE"]

_VERSION = 1
PUT, DELETE, DELETE_RANGE = 0, 1, 2

Operation = tuple[int, str, bytes, Optional[bytes]]


class ChangeLog:
    """Operations in the order they reached RocksDB: ``(op, family name, key, value or range end or None)``.

    :meth:`of_contents` makes the log of a database's whole content, which it keeps as each family's keys and
    values: encoding it builds no operation per entry and looks for no later write of a key (there is none)."""

    __slots__ = ("_ops", "_contents")

    def __init__(self, ops: Optional[list[Operation]] = None) -> None:
        self._ops: Optional[list[Operation]] = ops if ops is not None else []
        self._contents: Optional[list[tuple[str, Sequence[bytes], Sequence[bytes]]]] = None

    @classmethod
    def of_contents(cls, families: list[tuple[str, Sequence[bytes], Sequence[bytes]]]) -> "ChangeLog":
        """Puts of every entry of ``families``: ``(family name, its keys, their values)``, each key once and no
        range delete (a database's content)."""
        log = cls()
        log._ops, log._contents = None, families
        return log

    @property
    def ops(self) -> list[Operation]:
        if self._ops is None:
            assert self._contents is not None
            self._ops = [(PUT, name, key, value) for name, keys, values in self._contents
                         for key, value in zip(keys, values)]
        return self._ops

    def __len__(self) -> int:
        if self._ops is None:
            assert self._contents is not None
            return sum(len(keys) for _, keys, _ in self._contents)
        return len(self._ops)

    def __bool__(self) -> bool:
        return len(self) > 0

    def encode(self) -> bytes:
        if self._ops is None:
            return self._encode_contents()
        ops = self._ops
        last: dict[tuple[str, bytes], int] = {}
        for position, (op, family, key, _) in enumerate(ops):
            if op != DELETE_RANGE:
                last[(family, key)] = position
        families: dict[str, int] = {}
        flat: list[Any] = []
        for position, (op, family, key, value) in enumerate(ops):
            if op != DELETE_RANGE and last[(family, key)] != position:
                continue
            index = families.get(family)
            if index is None:
                index = families[family] = len(families)
            flat += (op, index, key, value)
        return msgpack.packb([_VERSION, list(families), flat], use_bin_type=True)

    def _encode_contents(self) -> bytes:
        assert self._contents is not None
        if fastpath is not None:
            return fastpath.encode_changelog_contents(self._contents, _VERSION, PUT, _encode_contents)
        return _encode_contents(self._contents)

    @classmethod
    def decode(cls, data: bytes, where: str) -> "ChangeLog":
        """Parse an encoded log; ``where`` names it in the error when it is damaged."""
        try:
            version, families, flat = msgpack.unpackb(data, raw=False)
            if version != _VERSION:
                raise ValueError(f"changelog version {version} is not {_VERSION}")
            ops = []
            for position in range(0, len(flat), 4):
                op, index, key, value = flat[position:position + 4]
                if op not in (PUT, DELETE, DELETE_RANGE):
                    raise ValueError(f"unknown operation {op!r}")
                ops.append((op, families[index], key, value))
            return cls(ops)
        except Exception as error:  # msgpack raises several unrelated types for garbage
            raise SnapshotCorruptedError(f"the state changelog {where} cannot be decoded ({error})") from error

    def apply(self, database: Any) -> None:
        """Write every operation to ``database`` (a :class:`~keyedstate.state.rocksdb.db.RocksDatabase`), in order,
        in write batches; missing column families are created."""
        batch = database.new_batch(record=False)
        handles: dict[str, Any] = {}
        for op, family, key, value in self.ops:
            handle = handles.get(family)
            if handle is None:
                database.column_family(family)
                handle = handles[family] = database.handles[family]
            if op == PUT:
                batch.put(key, value, handle)
            elif op == DELETE:
                batch.delete(key, handle)
            else:
                batch.delete_range(key, value, handle)
            if len(batch) >= 10_000:
                database.write(batch)
                batch = database.new_batch(record=False)
        if len(batch):
            database.write(batch)


def _encode_contents(families: list[tuple[str, Sequence[bytes], Sequence[bytes]]]) -> bytes:
    """The encoded puts of ``families``' entries (see :meth:`ChangeLog.of_contents`). The compiled fast path's
    ``encode_changelog_contents`` is its declared twin: the same bytes, or this function's result for anything it
    does not encode itself."""
    names: list[str] = []
    flat: list[Any] = []
    for name, keys, values in families:
        if keys:
            count = len(keys)
            flat += chain.from_iterable(zip(repeat(PUT, count), repeat(len(names), count), keys, values))
            names.append(name)
    return msgpack.packb([_VERSION, names, flat], use_bin_type=True)


class RecordingFamily:
    """A rocksdict column family whose writes are also appended to the database's operations (``ops``, a list the
    database empties in place when it hands a log out). Reads are the column family's own bound methods."""

    def __init__(self, family: Any, name: str, ops: list[Operation]) -> None:
        self._family = family
        self._name = name
        self._append = ops.append
        self._put = family.put
        self._delete = family.delete
        self.get = family.get
        self.items = family.items
        self.keys = family.keys
        self.iter = family.iter

    def put(self, key: bytes, value: bytes) -> None:
        self._put(key, value)
        self._append((PUT, self._name, key, value))

    def delete(self, key: bytes) -> None:
        self._delete(key)
        self._append((DELETE, self._name, key, None))

    def delete_range(self, start: bytes, end: bytes) -> None:
        self._family.delete_range(start, end)
        self._append((DELETE_RANGE, self._name, start, end))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._family, name)


class RecordingBatch:
    """A write batch that remembers its operations; the database adds them to its log when the batch is written."""

    def __init__(self, batch: Any, family_names: dict[int, str]) -> None:
        self.batch = batch
        self.ops: list[Operation] = []
        self._names = family_names  # id(handle) -> column family name

    def put(self, key: bytes, value: bytes, handle: Any) -> None:
        self.batch.put(key, value, handle)
        self.ops.append((PUT, self._names[id(handle)], key, value))

    def delete(self, key: bytes, handle: Any) -> None:
        self.batch.delete(key, handle)
        self.ops.append((DELETE, self._names[id(handle)], key, None))

    def delete_range(self, start: bytes, end: bytes, handle: Any) -> None:
        self.batch.delete_range(start, end, handle)
        self.ops.append((DELETE_RANGE, self._names[id(handle)], start, end))

    def __len__(self) -> int:
        return len(self.batch)
