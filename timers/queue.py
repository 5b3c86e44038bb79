"""The in-memory timer queue: a binary heap (``heapq``) plus a set, with lazy deletion.

Why ``heapq`` + set rather than ``sortedcontainers`` (measured, see ``docs/timers.md`` and
``bench/test_timers_bench.py::test_queue_choice``): register + delete 10 % + pop all, per timer, ``heapq`` + set
costs 1.2-1.9x a bare ``heapq`` loop, ``SortedList`` + set 1.7-3.5x and a ``SortedSet`` 2.1-3.5x (three runs on a
shared machine). The heap's push and pop run in C and compare the timer tuples in C; the set gives O(1)
de-duplication and O(1) deletion.

Invariants (``heap`` is a list managed by ``heapq``, ``live`` a set):

* ``live`` is exactly the set of registered timers; ``heap`` holds every live timer at least once, plus stale
  copies of deleted ones (lazy deletion: deleting a timer that is not the head only removes it from ``live``).
* ``heap[0]`` is always live (or the heap is empty): deleting or popping the head also drops stale entries that
  surface, so :meth:`peek` is O(1) and :meth:`add` can tell whether the new timer became the head.
* When stale entries outnumber live ones (plus a slack), the heap is rebuilt from ``live`` (O(n), amortised O(1)).

A timer deleted and registered again may sit in ``heap`` twice; equal tuples are interchangeable, so whichever copy
surfaces first stands for the live timer and the other one is dropped as stale afterwards.

Complexities: add O(log n), remove O(1) amortised (O(log n) for the head), peek O(1), pop O(log n).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from itertools import compress, count, islice
from operator import eq, itemgetter
from typing import Iterable, Iterator, Optional

from timers.timer import TimerTuple

__all__ = ["HeapTimerQueue", "sort_timers"]

COMPACT_SLACK = 64  # a heap is rebuilt from ``live`` once it holds this many deleted timers more than live ones


class HeapTimerQueue:
    """A set of timers ordered by (timestamp, key, namespace); registering the same timer twice keeps one."""

    __slots__ = ("heap", "live", "dirty")

    def __init__(self, timers: Iterable[TimerTuple] = ()) -> None:
        self.live: set[TimerTuple] = set(timers)
        self.heap: list[TimerTuple] = list(self.live)
        heapify(self.heap)
        # Set on every change; the heap timer storage flushes only dirty key groups into the raw column.
        self.dirty = False

    def __len__(self) -> int:
        return len(self.live)

    def __bool__(self) -> bool:
        return bool(self.live)

    def __contains__(self, timer: object) -> bool:
        return timer in self.live

    def add(self, timer: TimerTuple) -> bool:
        """Register ``timer``; return True when it became the head (the earliest timer). A duplicate is a no-op."""
        live = self.live
        if timer in live:
            return False
        live.add(timer)
        heap = self.heap
        heappush(heap, timer)
        self.dirty = True
        head = heap[0]
        return head is timer or head == timer

    def remove(self, timer: TimerTuple) -> bool:
        """Delete ``timer``; return whether it was registered (deleting an unknown timer is a silent no-op)."""
        live = self.live
        if timer not in live:
            return False
        live.remove(timer)
        self.dirty = True
        heap = self.heap
        if heap[0] == timer:
            heappop(heap)
            self._drop_stale_head()
        elif len(heap) > 2 * len(live) + COMPACT_SLACK:
            self.heap = list(live)
            heapify(self.heap)
        return True

    def remove_many(self, timers: list[TimerTuple]) -> bool:
        """Delete every timer of ``timers`` (unknown ones are ignored); return whether the head was one of them."""
        head = self.peek()
        for timer in timers:
            self.remove(timer)
        return head is not None and head in timers

    def peek(self) -> Optional[TimerTuple]:
        """The earliest timer, or None."""
        heap = self.heap
        return heap[0] if heap else None

    def pop(self) -> Optional[TimerTuple]:
        """Remove and return the earliest timer, or None."""
        heap = self.heap
        if not heap:
            return None
        timer = heappop(heap)
        self.live.remove(timer)
        self.dirty = True
        self._drop_stale_head()
        return timer

    def pop_and_peek(self) -> Optional[TimerTuple]:
        """Remove the earliest timer (the queue must not be empty) and return the new earliest one, or None."""
        heap = self.heap
        live = self.live
        live.remove(heappop(heap))
        self.dirty = True
        while heap:
            head = heap[0]
            if head in live:
                return head
            heappop(heap)
        return None

    def _drop_stale_head(self) -> None:
        heap = self.heap
        live = self.live
        while heap and heap[0] not in live:
            heappop(heap)

    def clear(self) -> None:
        self.live.clear()
        self.heap.clear()
        self.dirty = True

    def __iter__(self) -> Iterator[TimerTuple]:
        """Every registered timer in ascending order (a sorted copy: O(n log n))."""
        timers = list(self.live)
        sort_timers(timers)
        return iter(timers)


_timestamp_of = itemgetter(0)


def sort_timers(timers: list[TimerTuple]) -> None:
    """Sort into timer order (timestamp, then key group, key and namespace) several times faster than ``sort()``.

    Sorting by the int timestamp alone avoids tuple comparisons; each run of equal timestamps is then sorted as
    tuples (runs are short unless many keys share a timestamp, and then it costs about a plain sort).
    """
    timers.sort(key=_timestamp_of)
    timestamps = list(map(_timestamp_of, timers))
    run_start = run_end = -1
    for index in compress(count(1), map(eq, timestamps, islice(timestamps, 1, None))):
        if index != run_end:  # a new run of equal timestamps begins at index - 1
            if run_end > run_start:
                timers[run_start:run_end] = sorted(timers[run_start:run_end])
            run_start = index - 1
        run_end = index + 1
    if run_end > run_start:
        timers[run_start:run_end] = sorted(timers[run_start:run_end])
