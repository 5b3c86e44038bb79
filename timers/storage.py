"""Where timers live between snapshots: in memory (heap) or in a RocksDB column family (write-through).

Both storages keep the timers of one time domain in one raw column of the keyed state backend
(:meth:`~keyedstate.state.base.backend.KeyedStateBackend.raw_column`), in the record layout of :mod:`timers.codec`,
so a RocksDB database saved per key group (RocksDB mode, :mod:`keyedstate.state.key_groups.versioned`) contains
them and its restore brings them back. The layout is the same for both storages, so raw columns written with one
are read by the other.

* ``HEAP``: timers live in :class:`~timers.queue.HeapTimerQueue` s, one per key group; the raw column is written
  only in the backend's pre-snapshot hook, and only for key groups that changed since the last flush. A new service
  loads all restored timers into memory.
* ``ROCKSDB``: timers live in the column (a column family on the RocksDB backend), every register / delete is
  written through, and only the earliest timers of each key group are cached (:mod:`timers.column_queue`). A new
  service reads only those heads, so restoring a million timers does not load them all.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Optional, Union

from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import key_group_of_stored_key as key_group_of
from keyedstate.state.base.kinds import HEAP as HEAP_BACKEND
from keyedstate.state.base.kinds import ROCKSDB as ROCKSDB_BACKEND
from keyedstate.state.base.stores import RawColumn
from timers.codec import decode_record, encode_records, key_group_end, key_group_start
from timers.column_queue import DEFAULT_CACHE_CAPACITY, ColumnTimerQueue
from timers.heap_partitioned import HeapPartitionedTimerQueue
from timers.partitioned import KeyGroupPartitionedTimerQueue
from timers.queue import HeapTimerQueue
from timers.timer import InternalTimer

__all__ = ["TimerStorage", "TimeDomainQueue", "resolve_storage"]


class TimerStorage(str, enum.Enum):
    """How a timer service stores its timers (Flink: ``state.backend.rocksdb.timer-service.factory``)."""

    HEAP = HEAP_BACKEND
    ROCKSDB = ROCKSDB_BACKEND


def resolve_storage(storage: Union[TimerStorage, str, None], backend: Any) -> TimerStorage:
    """The explicit choice, else ROCKSDB on the RocksDB backend and HEAP everywhere else."""
    if storage is None:
        return TimerStorage.ROCKSDB if getattr(backend, "backend_kind", "") == ROCKSDB_BACKEND else TimerStorage.HEAP
    try:
        return TimerStorage(storage)
    except ValueError:
        raise ConfigurationError(
            f"unknown timer storage {storage!r}; use one of {[s.value for s in TimerStorage]}"
        ) from None


class TimeDomainQueue:
    """The timers of one time domain of one service: a key-group partitioned queue bound to its raw column."""

    __slots__ = ("column", "storage", "queue", "_range")

    def __init__(
        self, backend: Any, column_name: str, storage: TimerStorage, cache_capacity: int = DEFAULT_CACHE_CAPACITY
    ) -> None:
        self.column: RawColumn = backend.raw_column(column_name)
        self.storage = storage
        self._range = backend.key_group_range
        column = self.column
        if storage is TimerStorage.ROCKSDB:
            factory: Callable[[int], Any] = lambda kg: ColumnTimerQueue(column, kg, cache_capacity)  # noqa: E731
            self.queue = KeyGroupPartitionedTimerQueue(factory)
            self._open_restored_key_groups()
        else:
            self.queue = HeapPartitionedTimerQueue()
            self._load_all()

    def _owned_bounds(self) -> tuple[bytes, bytes]:
        return key_group_start(self._range.start), key_group_end(self._range.end)

    def _load_all(self) -> None:
        """Heap storage: read every restored timer of the owned key groups into memory."""
        start, end = self._owned_bounds()
        by_group: dict[int, list[InternalTimer]] = {}
        prefixes: dict[bytes, bytes] = {}
        for key, value in self.column.items(start, end):
            timer = decode_record(key, value, prefixes)
            timers = by_group.get(timer[3])
            if timers is None:
                timers = by_group[timer[3]] = []
            timers.append(timer)
        for key_group, timers in by_group.items():
            self.queue.queues[key_group] = HeapTimerQueue(timers)  # heapify: O(n); not dirty
        self.queue.rebuild_heads()

    def _open_restored_key_groups(self) -> None:
        """RocksDB storage: find the non-empty owned key groups (one seek each) and cache their heads."""
        key_group = self._range.start
        _, end = self._owned_bounds()
        while key_group <= self._range.end:
            first: Optional[tuple[bytes, bytes]] = next(iter(self.column.items(key_group_start(key_group), end)), None)
            if first is None:
                break
            key_group = key_group_of(first[0])
            self.queue.queue(key_group)
            key_group += 1

    def flush(self, write_deferred: bool = True) -> int:
        """Bring the raw column up to date; return how many key groups were written.

        Heap storage: write the key groups changed since the last flush. RocksDB storage: issue the deferred deletes
        of fired timers and, with ``write_deferred``, the deferred writes of new key groups
        (``ColumnTimerQueue.defer_writes``). Runs in the backend's pre-snapshot hook and (RocksDB, without
        ``write_deferred``) after every advance.
        """
        if self.storage is not TimerStorage.HEAP:
            return sum(queue.flush_deletes(write_deferred) for queue in self.queue.queues.values())
        column = self.column
        flushed = 0
        for key_group, queue in self.queue.queues.items():
            if not queue.dirty:
                continue
            column.delete_range(key_group_start(key_group), key_group_end(key_group))
            column.put_many(encode_records(queue.live))
            queue.dirty = False
            flushed += 1
        return flushed
