"""The RocksDB timer queue of one key group: timers live in a raw column, only the earliest ones in memory.

This is Flink's ``RocksDBCachingPriorityQueueSet``. Every register and delete is written through to the raw column
(a RocksDB column family on the RocksDB backend), whose keys sort by (key group, timestamp, key, namespace) (see
:mod:`timers.codec`). In memory the queue keeps a sorted cache of at most ``cache_capacity`` timers with this
invariant:

    the cache holds exactly the ``len(cache)`` smallest timers of the key group, and ``complete`` says whether
    that is all of them.

* add: a timer smaller than the largest cached one (or any timer while ``complete``) enters the cache, evicting the
  largest cached timer when full (which stays in the column); a larger one is only written to the column.
* remove / pop: delete from the column and the cache. An empty, incomplete cache is refilled by one forward scan of
  the key group's range of the column, so the column is read in batches of ``cache_capacity`` timers. The deletes
  of consecutive pops are deferred and issued as one range delete before anything else touches the key group's
  part of the column (and by :meth:`ColumnTimerQueue.flush_deletes`, which the service calls after every advance
  and before every snapshot).

While the cache holds every timer of the key group (``complete``), it keeps holding all of them as they are added,
up to ``COMPLETE_GROWTH`` times its capacity (then it keeps the smallest ``cache_capacity`` again): a key group that
starts empty (its first call in RocksDB mode, a job catching up on a backlog) registers and deletes without a single
read of the column, where a full cache would look up every register and delete beyond it. A pop from such a grown
cache first shrinks it to ``cache_capacity``, so firing pops from a short list and reads the column in batches.

A queue told its key group starts with no timers at all (:meth:`ColumnTimerQueue.defer_writes`: RocksDB mode's first
call of a key group, whose database is new) does not even write through: a heap queue
(:class:`~timers.queue.HeapTimerQueue`: a set, ``live``, and a heap with lazy deletion) holds its timers, and they
reach the column in one batch at the service's flush before a snapshot (so before the key group's changes are
taken), at its first pop, or when they outgrow the grown cache's limit; the sorted cache takes over from there.
Registering a timer then costs a set insert and a heap push, as on the heap, and the compiled ``TimerFlush`` settles
a run's calls by membership in ``live``, as it does for the heap.

So memory is O(key groups x cache_capacity) however many timers there are (a grown cache only holds timers added
since the key group was empty): restoring a million timers reads only the heads. The number of timers is known
exactly while it was counted once (one scan of the key group, done lazily on the first :meth:`__len__`) and kept up
to date afterwards with a point lookup per uncached register / delete.
"""

from __future__ import annotations

from bisect import bisect_left
from heapq import heappush
from itertools import islice
from typing import Iterator, Optional

from keyedstate.state.base.stores import RawColumn
from timers.codec import decode_record, encode_record, encode_record_key, encode_records, key_group_end, key_group_start
from timers.queue import HeapTimerQueue
from timers.timer import InternalTimer

__all__ = ["ColumnTimerQueue", "DEFAULT_CACHE_CAPACITY"]

DEFAULT_CACHE_CAPACITY = 128
"""Timers cached per key group and domain (Flink's default for the RocksDB timer cache is 128 as well)."""

COMPLETE_GROWTH = 64
"""How far a cache holding every timer of its key group grows, in multiples of its capacity (8,192 timers, about
1 MB, at the default): the list insert and delete stay a short memmove at that size."""


class ColumnTimerQueue:
    """The timers of one key group in one time domain, written through to ``column``."""

    __slots__ = ("column", "key_group", "capacity", "complete_capacity", "cache", "complete", "count", "_start",
                 "_end", "_prefixes", "_resume", "_pending_first", "_pending_last", "_pending", "live", "_held")

    def __init__(self, column: RawColumn, key_group: int, cache_capacity: int = DEFAULT_CACHE_CAPACITY) -> None:
        self.column = column
        self.key_group = key_group
        self.capacity = max(1, cache_capacity)
        self.complete_capacity = self.capacity * COMPLETE_GROWTH
        self.cache: list[InternalTimer] = []
        self.complete = False  # unknown until the first refill
        self.count: Optional[int] = None  # None: not counted yet
        self._start = key_group_start(key_group)
        self._end = key_group_end(key_group)
        self._prefixes: dict[bytes, bytes] = {}
        # Where the next refill may start scanning: every timer in the column is >= the last timer that left the
        # (then emptied) cache, because the cache always holds the smallest ones. Seeking there instead of to the
        # key group's start skips the tombstones of fired timers, which RocksDB would otherwise step over one by one.
        self._resume: Optional[bytes] = None
        # Deletes of fired timers are deferred while only pops happen: consecutive pops remove consecutive keys, so
        # they become one range delete (one point delete for a single timer), issued before any other operation
        # on this key group touches the column, and by :meth:`flush_deletes` (end of every advance, snapshots).
        self._pending = 0
        self._pending_first = b""
        self._pending_last = b""
        # While no timer is written to the column yet (defer_writes): a heap queue holds them, and ``live`` is its set
        # (the compiled TimerFlush settles a run's calls by membership in it); else None. ``cache`` is unused until
        # they are written.
        self._held: Optional[HeapTimerQueue] = None
        self.live: Optional[set[InternalTimer]] = None

    def defer_writes(self) -> None:
        """Hold new timers in memory only; the next flush, pop or iteration writes them all.

        The caller knows that the key group has no timer in the column (see the module docstring)."""
        if self.cache or self._pending:
            raise ValueError(f"key group {self.key_group} has timers: only a queue that starts empty defers writes")
        self._held = HeapTimerQueue()
        self.complete, self.count = True, 0
        self.live = self._held.live  # type: ignore[assignment]  # the tuples it is given: timers, as the cache's

    def _write_held(self, keep: bool = True) -> bool:
        """Write the held timers (:meth:`defer_writes`) and hand over to the cache: all of them, sorted, as a grown
        cache holds them (past its limit, the smallest ``capacity``), or without ``keep`` none of them (the next
        read of the head refills it from the column); whether there were any."""
        live, self.live, self._held = self.live, None, None
        if not live:
            return False
        self.column.put_many(encode_records(live))  # in any order: RocksDB sorts them
        cache = sorted(live) if keep else []
        if len(cache) > self.complete_capacity or not keep:
            del cache[self.capacity:]
            self.complete = False
        self.cache = cache
        return True

    def flush_deletes(self, write_deferred: bool = True) -> bool:
        """Issue the deferred deletes of fired timers (and deferred writes); whether there were any.

        The timers whose writes were deferred (:meth:`defer_writes`) are written only with ``write_deferred``: by the
        flush before a snapshot; the one after an advance has only the fired timers' deletes to issue, and a pop
        writes them."""
        if self.live is not None:
            # for a snapshot or a scan of the column: the head is read back from the column when it is next needed,
            # which costs less than sorting every held timer into the cache
            return self._write_held(keep=False) if write_deferred else False
        pending = self._pending
        if pending:
            self._pending = 0
            if pending == 1:
                self.column.delete(self._pending_first)
            else:  # exactly the popped timers lie in [first, last]: nothing else was written in between
                self.column.delete_range(self._pending_first, self._pending_last + b"\x00")
        return pending > 0

    def _refill(self) -> None:
        """Load the smallest ``capacity`` timers of the key group (the cache is empty and incomplete)."""
        if self._pending:
            self.flush_deletes()
        prefixes = self._prefixes
        if len(prefixes) > 4 * self.capacity:
            prefixes.clear()
        records = islice(self.column.items(self._resume or self._start, self._end), self.capacity)
        self.cache = [decode_record(key, value, prefixes) for key, value in records]
        self.complete = len(self.cache) < self.capacity

    def _in_cache(self, timer: InternalTimer) -> bool:
        cache = self.cache
        i = bisect_left(cache, timer)
        return i < len(cache) and cache[i] == timer

    def add(self, timer: InternalTimer) -> bool:
        """Register ``timer`` (write-through); return True when it became the head. A duplicate is a no-op."""
        held = self._held
        if held is not None:
            # HeapTimerQueue.add inlined: a new key group's first call registers a timer per key through here
            live = held.live
            if timer in live:
                return False
            live.add(timer)
            heap = held.heap
            heappush(heap, timer)
            held.dirty = True
            head = heap[0]
            self.count += 1  # type: ignore[operator]  # counted from 0 while held
            if len(live) > self.complete_capacity:
                self._write_held()
            return head is timer or head == timer
        if self._pending:
            self.flush_deletes()
        cache = self.cache
        if not cache and not self.complete:
            self._refill()
            cache = self.cache
        if self.complete or (cache and timer < cache[-1]):
            i = bisect_left(cache, timer)
            if i < len(cache) and cache[i] == timer:
                return False
            key, value = encode_record(timer)
            self.column.put(key, value)
            cache.insert(i, timer)
            if len(cache) > (self.complete_capacity if self.complete else self.capacity):
                del cache[self.capacity:]
                self.complete = False
            if self.count is not None:
                self.count += 1
            return i == 0
        # Beyond the cached range: only the column knows whether it is new.
        key, value = encode_record(timer)
        if self.count is not None and self.column.get(key) is None:
            self.count += 1
        self.column.put(key, value)
        return False

    def remove(self, timer: InternalTimer) -> bool:
        """Delete ``timer``; return whether it was registered (an unknown timer is a silent no-op)."""
        held = self._held
        if held is not None:
            if not held.remove(timer):
                return False
            self.count -= 1  # type: ignore[operator]  # counted from 0 while held
            return True
        if self._pending:
            self.flush_deletes()
        cache = self.cache
        i = bisect_left(cache, timer)
        if i < len(cache) and cache[i] == timer:
            del cache[i]
            key = encode_record_key(timer)
            self.column.delete(key)
            if not cache:
                self._resume = key
            if self.count is not None:
                self.count -= 1
            return True
        if self.complete or (cache and timer < cache[-1]):
            return False  # the cache covers this range exactly
        key = encode_record_key(timer)
        if self.column.get(key) is None:
            return False
        self.column.delete(key)
        if self.count is not None:
            self.count -= 1
        return True

    def remove_many(self, timers: list[InternalTimer]) -> bool:
        """Delete every timer of ``timers`` (unknown ones are ignored); return whether the head was one of them.

        Beyond the cache only the column knows whether a timer exists; those are looked up together in one
        multi-get (a key deleting the timers it registered for each element of a run lands here)."""
        head = self.peek()  # loads the cache when it is empty, so the head is cached
        if self.live is not None:
            for timer in timers:
                self.remove(timer)
            return head is not None and head in timers
        if self._pending:
            self.flush_deletes()
        lookups = []
        for timer in timers:
            cache = self.cache
            i = bisect_left(cache, timer)
            if i < len(cache) and cache[i] == timer:
                self.remove(timer)
            elif not (self.complete or (cache and timer < cache[-1])):
                lookups.append(encode_record_key(timer))
        if lookups:
            column = self.column
            for key, value in zip(lookups, column.get_many(lookups)):
                if value is not None:
                    column.delete(key)
                    if self.count is not None:
                        self.count -= 1
        return head is not None and head in timers

    def peek(self) -> Optional[InternalTimer]:
        """The earliest timer of the key group, or None."""
        if self._held is not None:
            return self._held.peek()  # type: ignore[return-value]  # (see defer_writes)
        cache = self.cache
        if cache:
            return cache[0]
        if self.complete:
            return None
        self._refill()
        return self.cache[0] if self.cache else None

    def pop(self) -> Optional[InternalTimer]:
        """Remove and return the earliest timer, or None (its delete in the column may be deferred, see above)."""
        timer = self.peek()
        if timer is None:
            return None
        if self.live is not None:
            self._write_held()  # then as always: the pops' deletes are deferred and coalesced
        cache = self.cache
        if len(cache) > self.capacity:  # grown while complete: fire from a short list (see the module docstring)
            del cache[self.capacity:]
            self.complete = False
        del cache[0]
        key = encode_record_key(timer)
        if not self._pending:
            self._pending_first = key
        self._pending_last = key
        self._pending += 1
        if not cache:
            self._resume = key
        if self.count is not None:
            self.count -= 1
        return timer

    def pop_and_peek(self) -> Optional[InternalTimer]:
        """Remove the earliest timer (the queue must not be empty) and return the new earliest one, or None."""
        self.pop()
        return self.peek()

    def clear(self) -> None:
        self._pending = 0
        self.live, self._held = None, None
        self.column.delete_range(self._start, self._end)
        self.cache = []
        self._resume = None
        self.complete = True
        self.count = 0

    def __len__(self) -> int:
        if self.count is None:
            self.flush_deletes()
            if self.complete:
                self.count = len(self.cache)
            else:
                self.count = sum(1 for _ in self.column.items(self._start, self._end))
        return self.count

    def __bool__(self) -> bool:
        return self.peek() is not None

    def __contains__(self, timer: object) -> bool:
        if not isinstance(timer, InternalTimer):
            return False
        if self.live is not None:
            return timer in self.live
        if self._in_cache(timer):
            return True
        if self.complete or (self.cache and timer < self.cache[-1]):
            return False
        self.flush_deletes()
        return self.column.get(encode_record_key(timer)) is not None

    def __iter__(self) -> Iterator[InternalTimer]:
        """Every timer of the key group in ascending order, streamed from the column."""
        self.flush_deletes()
        prefixes: dict[bytes, bytes] = {}
        for key, value in self.column.items(self._start, self._end):
            yield decode_record(key, value, prefixes)
