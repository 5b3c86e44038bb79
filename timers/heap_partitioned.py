"""The key-group partitioned queue over in-memory heaps, specialised for registering and firing many timers.

:class:`HeapPartitionedTimerQueue` is :class:`~timers.partitioned.KeyGroupPartitionedTimerQueue` over
:class:`~timers.queue.HeapTimerQueue` s with two changes that matter when timers are counted in millions:

* ``add`` and ``remove`` run once per registration / deletion, so the per-key-group heap operations are inlined.
* :meth:`HeapPartitionedTimerQueue.due` fires in bulk. It takes every due timer out of its key group in one pass
  (heap pops for the first few, then one linear partition when many are due), sorts them once, and walks that
  sorted *batch*. That replaces two heap operations per fired timer (the key group's heap and ``heads``) with an
  amortised share of one C sort.

Taken timers stay registered until they fire. The unfired part of the batch is the slice after the walk's position
(read from the list iterator, so walking costs nothing per timer); membership is a binary search in it, and deleting
a taken timer puts it in ``_cancelled``. ``add`` and ``remove`` consult both, only for timers at or before the
firing limit, and the base class's views (``peek``, ``count``, the iterators, ...) add :meth:`_unfired`, so a
callback can delete a due timer before it fires or register it again. A timer registered by a callback that sorts
before the next taken one fires first, exactly as in the one-by-one order. If firing stops early (a callback raised),
the unfired timers go back into their key groups; so they do when a callback advances time again (a nested call),
which then fires them in order itself.
"""

from __future__ import annotations

from bisect import bisect_left
from heapq import heapify, heappop, heappush, heapreplace
from typing import Generator, Iterator, Optional

from timers.partitioned import HEADS_SLACK, KeyGroupPartitionedTimerQueue
from timers.queue import COMPACT_SLACK, HeapTimerQueue, sort_timers
from timers.timer import TimerTuple

__all__ = ["HeapPartitionedTimerQueue"]

_FIRST_POPS = 32
# Once this share of a key group's timers has been popped one by one, the rest of its due timers are taken with one
# linear pass: a pop costs about as much as 16 steps of the pass.
_PARTITION_SHARE = 16


class HeapPartitionedTimerQueue(KeyGroupPartitionedTimerQueue):
    """The timers of one time domain over all owned key groups, in heaps, with bulk firing (see the module).

    It replaces only what runs per timer (``add``, ``remove``, ``remove_many``) and firing (``pop_due``, ``due``);
    everything else is the base class, which sees the batch being fired through :meth:`_unfired`.
    """

    __slots__ = ("_walk", "_limit", "_holding", "_cancelled")

    def __init__(self) -> None:
        super().__init__(lambda key_group: HeapTimerQueue())
        self._walk: Optional[Iterator[TimerTuple]] = None  # the iterator over ``batch``
        self._limit = 0
        self._holding = False  # the walk's last timer is held back while earlier callback timers fire
        self._cancelled: set[TimerTuple] = set()

    def _unfired_start(self) -> int:
        batch = self.batch
        start = len(batch) - self._walk.__length_hint__()  # type: ignore[arg-type, union-attr]
        return start - 1 if self._holding else start

    def _taken(self, timer: TimerTuple) -> bool:
        """Whether ``timer`` is in the unfired part of the batch and not cancelled (only while firing)."""
        batch = self.batch
        if batch is None or timer[0] > self._limit:
            return False
        index = bisect_left(batch, timer, self._unfired_start())
        return index < len(batch) and batch[index] == timer and timer not in self._cancelled

    def _unfired(self) -> list[TimerTuple]:
        if self.batch is None:
            return []
        cancelled = self._cancelled
        return [timer for timer in self.batch[self._unfired_start():] if timer not in cancelled]

    def add(self, timer: TimerTuple) -> None:
        queue = self.queues.get(timer[3])
        if queue is None:
            queue = self.queue(timer[3])
        live = queue.live
        size = len(live)
        live.add(timer)  # one hash instead of a membership test and an add
        if len(live) == size:
            return
        if self.batch is not None and timer[0] <= self._limit and self._add_to_batch(timer):
            live.remove(timer)
            return
        heap = queue.heap
        heappush(heap, timer)
        queue.dirty = True
        head = heap[0]
        if head is timer or head == timer:
            heads = self._heads
            heappush(heads, timer)
            if len(heads) > 2 * len(self.queues) + HEADS_SLACK:
                self.rebuild_heads()

    def _add_to_batch(self, timer: TimerTuple) -> bool:
        """Registering a timer of the unfired batch: a no-op, or undoing its cancellation. True when handled."""
        cancelled = self._cancelled
        if timer in cancelled:  # only unfired batch timers are ever cancelled
            cancelled.remove(timer)
            return True
        return self._taken(timer)

    def remove(self, timer: TimerTuple) -> bool:
        if self.batch is not None and timer[0] <= self._limit and self._taken(timer):
            self._cancelled.add(timer)
            return True
        # the base class's remove with HeapTimerQueue.remove inlined: a delete per element is common
        # (Flink's count-with-timeout deletes the previous timer before registering the next)
        queue = self.queues.get(timer[3])
        if queue is None:
            return False
        live = queue.live
        if timer not in live:
            return False
        live.remove(timer)
        queue.dirty = True
        heap = queue.heap
        if heap[0] == timer:
            heappop(heap)
            while heap and heap[0] not in live:
                heappop(heap)
            if heap:
                heappush(self._heads, heap[0])
        elif len(heap) > 2 * len(live) + COMPACT_SLACK:
            queue.heap = list(live)
            heapify(queue.heap)
        return True

    def remove_many(self, timers: list[TimerTuple], key_group: int) -> None:
        for timer in timers:  # each may be in a firing batch (see remove)
            self.remove(timer)

    def pop_due(self, limit: int) -> Optional[TimerTuple]:
        self._release_batch()
        for timer in self._due_before(limit, None):
            return timer
        return None

    def due(self, limit: int) -> Generator[TimerTuple, None, None]:
        heads = self._heads
        # A callback advancing time again (a nested call): the outer call's unfired timers go back into their key
        # groups and its walk ends, so this call fires them in order with everything else that is due; the outer
        # call then takes whatever is still due afresh.
        self._release_batch()
        cancelled = self._cancelled
        while heads and heads[0][0] <= limit:
            batch = self._take_due(limit)
            walk = iter(batch)
            self.batch, self._walk, self._limit = batch, walk, limit
            try:
                for timer in walk:
                    if heads and heads[0] < timer:  # registered by a callback, due before this one
                        self._holding = True
                        yield from self._due_before(limit, timer)
                        if self.batch is not batch:  # a nested call released the batch, this timer included
                            break
                        self._holding = False
                    if cancelled and timer in cancelled:  # deleted by a callback before its turn
                        cancelled.remove(timer)
                        continue
                    yield timer
            finally:
                if self.batch is batch:
                    self._release_batch()

    def _release_batch(self) -> None:
        """Put the unfired timers of the batch being fired (if any) back into their key groups and end its walk."""
        batch = self.batch
        if batch is None:
            return
        unfired = self._unfired()
        self._walk.__setstate__(len(batch))  # type: ignore[union-attr]  # the taking call's loop ends at its next step
        self.batch = self._walk = None
        self._holding = False
        self._cancelled.clear()
        for timer in unfired:
            self.add(timer)

    def _due_before(self, limit: int, bound: Optional[TimerTuple]) -> Iterator[TimerTuple]:
        """One by one: due timers still in the key-group queues, while they sort before ``bound`` (if given)."""
        heads = self._heads
        queues = self.queues
        while heads:
            entry = heads[0]
            if entry[0] > limit or (bound is not None and not entry < bound):
                return
            queue = queues[entry[3]]
            heap = queue.heap
            if heap and (heap[0] is entry or heap[0] == entry):
                live = queue.live
                live.remove(heappop(heap))
                queue.dirty = True
                while heap:
                    head = heap[0]
                    if head in live:
                        heapreplace(heads, head)
                        break
                    heappop(heap)
                else:
                    heappop(heads)
                yield entry
            else:
                heappop(heads)

    def _take_due(self, limit: int) -> list[TimerTuple]:
        """Remove every timer with timestamp <= ``limit`` from the key-group queues; return them sorted."""
        heads = self._heads
        key_groups = set()
        while heads and heads[0][0] <= limit:
            key_groups.add(heappop(heads)[3])
        taken: list[TimerTuple] = []
        for key_group in key_groups:
            queue = self.queues[key_group]
            _take_due_of_queue(queue, limit, taken)
            if queue.heap:
                heappush(heads, queue.heap[0])
        sort_timers(taken)
        return taken


def _take_due_of_queue(queue: HeapTimerQueue, limit: int, taken: list[TimerTuple]) -> None:
    """Append the due timers of one key group to ``taken`` and remove them from the queue.

    Pops one by one while few are due (O(log n) each); once the number popped is a sixteenth of what is left, one
    linear pass partitions the rest, so the cost stays within a constant factor of popping and is far lower for
    large backlogs.
    """
    heap = queue.heap
    live = queue.live
    popped = 0
    while heap and heap[0][0] <= limit:
        if popped >= _FIRST_POPS and _PARTITION_SHARE * popped >= len(live):
            due_now = [timer for timer in live if timer[0] <= limit]
            taken += due_now
            if len(due_now) == len(live):
                live.clear()
                heap = queue.heap = []
            else:
                live.difference_update(due_now)
                heap = queue.heap = [timer for timer in live if timer[0] > limit]
                heapify(heap)
            break
        timer = heappop(heap)
        if timer in live:  # else a stale copy of a deleted or duplicated timer
            live.remove(timer)
            taken.append(timer)
            popped += 1
    while heap and heap[0] not in live:
        heappop(heap)
    queue.dirty = True
