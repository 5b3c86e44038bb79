"""The heap timer storage's queue: one binary heap over all key groups + one de-duplication set per key group.

This is Flink's ``HeapPriorityQueueSet`` (what Flink's heap timer service uses): the order lives in a single heap,
while the *set* semantics, deletes, counts and every per-key-group question are answered by the per-key-group sets.
Compared with one heap per key group plus a heap of heads (:class:`~timers.partitioned.KeyGroupPartitionedTimerQueue`,
which the RocksDB storage uses, as Flink does), firing a timer costs one heap operation instead of two; measured, it
is what brings register + fire to about half the throughput of a bare ``heapq`` loop (``docs/timers.md``).

Invariants: ``groups[kg]`` is exactly the set of registered timers of key group ``kg``; ``heap`` holds every
registered timer at least once plus stale copies of deleted ones (lazy deletion), and ``heap[0]`` is always
registered (deleting or firing the top drops stale entries that surface). The heap is rebuilt when stale entries
outnumber live ones (plus a slack).

Per key group: the count and membership are O(1); the earliest timer is O(1) when one key group holds all timers
(the Spark case: one key group per Spark group) and O(timers of the key group) otherwise; the timers in order are
O(m log m).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Iterable, Iterator, Optional

from timers.timer import InternalTimer

__all__ = ["HeapTimerQueueSet"]

_COMPACT_SLACK = 64


class HeapTimerQueueSet:
    """All timers of one time domain of the heap storage."""

    __slots__ = ("heap", "groups", "dirty", "_size")

    def __init__(self) -> None:
        self.heap: list[InternalTimer] = []
        self.groups: dict[int, set[InternalTimer]] = {}
        self.dirty: set[int] = set()  # key groups changed since the last flush into the raw column
        self._size = 0

    def load(self, timers: Iterable[InternalTimer]) -> None:
        """Add restored timers in bulk (O(n)); they are not marked dirty (the raw column already holds them)."""
        groups = self.groups
        for timer in timers:
            group = groups.get(timer[3])
            if group is None:
                group = groups[timer[3]] = set()
            group.add(timer)
        self._rebuild()

    def _rebuild(self) -> None:
        heap = self.heap
        heap[:] = [timer for group in self.groups.values() for timer in group]
        heapify(heap)  # in place: a running ``due`` generator keeps using the same list
        self._size = len(heap)

    # ---- single timers -----------------------------------------------------------------------------------------

    def add(self, timer: InternalTimer) -> None:
        """Register ``timer`` (a no-op when it is registered already)."""
        group = self.groups.get(timer[3])
        if group is None:
            group = self.groups[timer[3]] = set()
        elif timer in group:
            return
        group.add(timer)
        heappush(self.heap, timer)
        self.dirty.add(timer[3])
        self._size += 1

    def remove(self, timer: InternalTimer) -> bool:
        """Delete ``timer``; return whether it was registered (unknown timers are ignored)."""
        group = self.groups.get(timer[3])
        if group is None or timer not in group:
            return False
        group.remove(timer)
        self.dirty.add(timer[3])
        self._size -= 1
        heap = self.heap
        if heap[0] == timer:
            heappop(heap)
            self._drop_stale_top()
        elif len(heap) > 2 * self._size + _COMPACT_SLACK:
            self._rebuild()
        return True

    def _drop_stale_top(self) -> None:
        heap = self.heap
        groups = self.groups
        while heap:
            top = heap[0]
            if top in groups[top[3]]:
                return
            heappop(heap)

    def peek(self) -> Optional[InternalTimer]:
        """The earliest timer, or None."""
        heap = self.heap
        return heap[0] if heap else None

    def due(self, limit: int) -> Iterator[InternalTimer]:
        """Pop and yield, one by one, every timer with timestamp <= ``limit`` in ascending order.

        Timers added between two steps (by the callback of the previous timer) are seen by the next step.
        """
        heap = self.heap
        groups = self.groups
        dirty = self.dirty
        while heap:
            timer = heap[0]
            if timer[0] > limit:
                return
            heappop(heap)
            group = groups[timer[3]]
            if timer in group:  # else a stale copy of a timer deleted and registered again
                group.remove(timer)
                dirty.add(timer[3])
                self._size -= 1
                while heap and heap[0] not in groups[heap[0][3]]:
                    heappop(heap)
                yield timer

    def pop_due(self, limit: int) -> Optional[InternalTimer]:
        """Remove and return the earliest timer if its timestamp is <= ``limit``; else None."""
        for timer in self.due(limit):
            return timer
        return None

    # ---- key groups --------------------------------------------------------------------------------------------

    def earliest(self, key_group: int) -> Optional[InternalTimer]:
        """The earliest timer of ``key_group``, or None."""
        group = self.groups.get(key_group)
        if not group:
            return None
        if len(group) == self._size:  # every timer is in this key group: the heap's top
            return self.heap[0]
        return min(group)

    def timers_of(self, key_group: int) -> Iterator[InternalTimer]:
        """Every timer of ``key_group``, ascending."""
        return iter(sorted(self.groups.get(key_group, ())))

    def replace_key_group(self, key_group: int, timers: Iterable[InternalTimer]) -> None:
        """Make ``timers`` exactly the timers of ``key_group``."""
        old = self.groups.get(key_group)
        new = set(timers)
        self.groups[key_group] = new
        self.dirty.add(key_group)
        self._size += len(new) - (len(old) if old else 0)
        heap = self.heap
        for timer in new:
            heappush(heap, timer)
        self._drop_stale_top()
        if len(heap) > 2 * self._size + _COMPACT_SLACK:
            self._rebuild()

    def key_groups(self) -> list[int]:
        """Key groups that have at least one timer, ascending."""
        return sorted(kg for kg, group in self.groups.items() if group)

    def count(self, key_group: Optional[int] = None) -> int:
        """Number of timers (of one key group, or all)."""
        if key_group is None:
            return self._size
        return len(self.groups.get(key_group, ()))

    def __iter__(self) -> Iterator[InternalTimer]:
        """Every timer, ascending by key group, then timestamp."""
        for key_group in sorted(self.groups):
            yield from sorted(self.groups[key_group])
