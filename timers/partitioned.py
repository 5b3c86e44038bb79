"""A timer queue partitioned by key group (Flink's ``KeyGroupPartitionedPriorityQueue``).

One queue per key group (a :class:`~timers.queue.HeapTimerQueue` or a :class:`~timers.column_queue.ColumnTimerQueue`)
answers per-key-group questions cheaply (earliest timer, all timers, replace all timers), which snapshots by key
group and the Spark integration (one key group per Spark group) need. The global minimum comes from a second heap,
``heads``, of key-group heads, maintained with lazy deletion:

    invariant: the current head of every non-empty key group is in ``heads``; other entries are stale.

Whenever a key group's head changes (a smaller timer is added, the head is deleted or fired, the key group is
replaced) the new head is pushed. :meth:`peek` drops stale top entries (those that are no longer the head of their
key group); the first entry that is a head is the global minimum, since every head is in ``heads``. Firing replaces
the top by the key group's next head in one ``heapreplace``. ``heads`` is rebuilt when stale entries pile up.

Costs: add O(log n) (+ O(log k) when the head changes), pop O(log n + log k), peek amortised O(1), where k is the
number of key groups.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush, heapreplace
from itertools import compress, count, islice
from operator import eq, itemgetter
from typing import Any, Callable, Iterable, Iterator, Optional

from timers.queue import _COMPACT_SLACK, HeapTimerQueue
from timers.timer import InternalTimer

__all__ = ["KeyGroupPartitionedTimerQueue", "HeapPartitionedTimerQueue"]

_HEADS_SLACK = 64


class KeyGroupPartitionedTimerQueue:
    """The timers of one time domain over all owned key groups.

    ``factory(key_group)`` creates the queue of a key group on first use; queues must provide ``add`` (returning
    whether the timer became the head), ``remove``, ``peek``, ``pop``, ``clear``, ``__len__`` and ascending
    ``__iter__``.
    """

    __slots__ = ("_factory", "queues", "_heads")

    def __init__(self, factory: Callable[[int], Any]) -> None:
        self._factory = factory
        self.queues: dict[int, Any] = {}
        self._heads: list[InternalTimer] = []

    def queue(self, key_group: int) -> Any:
        """The queue of ``key_group``, created when missing."""
        queue = self.queues.get(key_group)
        if queue is None:
            queue = self.queues[key_group] = self._factory(key_group)
            head = queue.peek()  # a column queue may already hold restored timers
            if head is not None:
                heappush(self._heads, head)
        return queue

    # ---- single timers -----------------------------------------------------------------------------------------

    def add(self, timer: InternalTimer) -> None:
        """Register ``timer`` (a no-op when it is registered already)."""
        queue = self.queues.get(timer[3])
        if queue is None:
            queue = self.queue(timer[3])
        if queue.add(timer):
            heads = self._heads
            heappush(heads, timer)
            if len(heads) > 2 * len(self.queues) + _HEADS_SLACK:
                self._rebuild_heads()

    def remove(self, timer: InternalTimer) -> bool:
        """Delete ``timer``; return whether it was registered (unknown timers are ignored)."""
        queue = self.queues.get(timer[3])
        if queue is None:
            return False
        head = queue.peek()
        if not queue.remove(timer):
            return False
        if head == timer:
            head = queue.peek()
            if head is not None:
                heappush(self._heads, head)
        return True

    def peek(self) -> Optional[InternalTimer]:
        """The earliest timer over all key groups, or None."""
        heads = self._heads
        queues = self.queues
        while heads:
            entry = heads[0]
            head = queues[entry[3]].peek()
            if head is entry or head == entry:
                return entry
            heappop(heads)  # stale: the key group's real head is in ``heads`` too
        return None

    def pop_due(self, limit: int) -> Optional[InternalTimer]:
        """Remove and return the earliest timer if its timestamp is <= ``limit``; else None."""
        heads = self._heads
        queues = self.queues
        while heads:
            entry = heads[0]
            if entry[0] > limit:
                return None  # every head is >= this entry (stale or not)
            queue = queues[entry[3]]
            head = queue.peek()
            if head is entry or head == entry:
                head = queue.pop_and_peek()
                if head is None:
                    heappop(heads)
                else:
                    heapreplace(heads, head)
                return entry
            heappop(heads)
        return None

    def _rebuild_heads(self) -> None:
        heads = self._heads
        heads[:] = [head for head in (q.peek() for q in self.queues.values()) if head is not None]
        heapify(heads)  # in place: a running ``due`` generator keeps using the same list

    def due(self, limit: int) -> Iterator[InternalTimer]:
        """Pop and yield, one by one, every timer with timestamp <= ``limit`` in ascending order.

        Timers added between two steps (by the callback of the previous timer) are seen by the next step.
        """
        pop_due = self.pop_due
        while True:
            timer = pop_due(limit)
            if timer is None:
                return
            yield timer

    # ---- key groups --------------------------------------------------------------------------------------------

    def earliest(self, key_group: int) -> Optional[InternalTimer]:
        """The earliest timer of ``key_group``, or None."""
        queue = self.queues.get(key_group)
        return None if queue is None else queue.peek()

    def timers_of(self, key_group: int) -> Iterator[InternalTimer]:
        """Every timer of ``key_group``, ascending."""
        queue = self.queues.get(key_group)
        return iter(()) if queue is None else iter(queue)

    def replace_key_group(self, key_group: int, timers: Iterable[InternalTimer]) -> None:
        """Make ``timers`` exactly the timers of ``key_group``."""
        queue = self.queue(key_group)
        queue.clear()
        for timer in timers:
            queue.add(timer)
        head = queue.peek()
        if head is not None:
            heappush(self._heads, head)

    def key_groups(self) -> list[int]:
        """Key groups that have at least one timer, ascending."""
        return sorted(kg for kg, queue in self.queues.items() if queue.peek() is not None)

    def count(self, key_group: Optional[int] = None) -> int:
        """Number of timers (of one key group, or all)."""
        if key_group is not None:
            queue = self.queues.get(key_group)
            return 0 if queue is None else len(queue)
        return sum(len(queue) for queue in self.queues.values())

    def __iter__(self) -> Iterator[InternalTimer]:
        """Every timer, ascending by key group, then timestamp."""
        for key_group in sorted(self.queues):
            yield from self.queues[key_group]


class HeapPartitionedTimerQueue(KeyGroupPartitionedTimerQueue):
    """The same queue over :class:`~timers.queue.HeapTimerQueue` s, with the hot paths specialised.

    ``add`` runs once per timer; inlining the per-key-group heap operations saves two Python calls per timer.

    :meth:`due` fires in bulk: it takes every due timer out of its key group in one pass (heap pops for the first
    few, then one linear partition when many are due), sorts them once, and yields from that list. That replaces two
    heap operations per fired timer (the key group's heap and ``heads``) with an amortised share of one C sort, which
    is what makes firing a large backlog (end of input, a watermark jump after a long batch) cheap. Taken timers stay
    registered until they fire: they sit in ``_firing``, which ``add``, ``remove``, ``count`` and the iterators
    consult, so a callback can delete a due timer before it fires or re-register it. A timer registered by a
    callback that sorts before the next taken one fires first, exactly as in the one-by-one order. If firing stops
    early (a callback raised), the unfired timers go back into their key groups.
    """

    __slots__ = ("_firing",)

    def __init__(self) -> None:
        super().__init__(lambda key_group: HeapTimerQueue())
        self._firing: set[InternalTimer] = set()

    def add(self, timer: InternalTimer) -> None:
        queue = self.queues.get(timer[3])
        if queue is None:
            queue = self.queue(timer[3])
        live = queue.live
        size = len(live)
        live.add(timer)  # one hash instead of a membership test and an add
        if len(live) == size:
            return
        firing = self._firing
        if firing and timer in firing:
            live.remove(timer)
            return
        heap = queue.heap
        heappush(heap, timer)
        queue.dirty = True
        head = heap[0]
        if head is timer or head == timer:
            heads = self._heads
            heappush(heads, timer)
            if len(heads) > 2 * len(self.queues) + _HEADS_SLACK:
                self._rebuild_heads()

    def remove(self, timer: InternalTimer) -> bool:
        firing = self._firing
        if firing and timer in firing:
            firing.remove(timer)
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
        elif len(heap) > 2 * len(live) + _COMPACT_SLACK:
            queue.heap = list(live)
            heapify(queue.heap)
        return True

    def pop_due(self, limit: int) -> Optional[InternalTimer]:
        for timer in self._due_before(limit, None):
            return timer
        return None

    def due(self, limit: int) -> Iterator[InternalTimer]:
        heads = self._heads
        firing = self._firing
        if firing:  # a callback advancing time again: the taken batch belongs to the outer call
            yield from self._due_before(limit, None)
            return
        while heads and heads[0][0] <= limit:
            batch = self._take_due(limit)
            try:
                for timer in batch:
                    if heads and heads[0] < timer:  # registered by a callback, due before this one
                        yield from self._due_before(limit, timer)
                    try:
                        firing.remove(timer)
                    except KeyError:  # deleted by a callback before its turn
                        continue
                    yield timer
            finally:
                if firing:
                    self._return_unfired()

    def _due_before(self, limit: int, bound: Optional[InternalTimer]) -> Iterator[InternalTimer]:
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

    def _take_due(self, limit: int) -> list[InternalTimer]:
        """Move every timer with timestamp <= ``limit`` from the key-group queues into ``_firing``; sorted."""
        heads = self._heads
        key_groups = set()
        while heads and heads[0][0] <= limit:
            key_groups.add(heappop(heads)[3])
        taken: list[InternalTimer] = []
        for key_group in key_groups:
            queue = self.queues[key_group]
            _take_due_of_queue(queue, limit, taken)
            if queue.heap:
                heappush(heads, queue.heap[0])
        _sort_timers(taken)
        self._firing.update(taken)
        return taken

    def _return_unfired(self) -> None:
        firing = list(self._firing)
        self._firing.clear()
        for timer in firing:
            self.add(timer)

    # ---- views that include taken, unfired timers ----------------------------------------------------------------

    def peek(self) -> Optional[InternalTimer]:
        head = super().peek()
        if self._firing:
            first = min(self._firing)
            return first if head is None or first < head else head
        return head

    def earliest(self, key_group: int) -> Optional[InternalTimer]:
        head = super().earliest(key_group)
        taken = [timer for timer in self._firing if timer[3] == key_group]
        if taken:
            first = min(taken)
            return first if head is None or first < head else head
        return head

    def timers_of(self, key_group: int) -> Iterator[InternalTimer]:
        taken = [timer for timer in self._firing if timer[3] == key_group]
        if not taken:
            return super().timers_of(key_group)
        return iter(sorted([*super().timers_of(key_group), *taken]))

    def replace_key_group(self, key_group: int, timers: Iterable[InternalTimer]) -> None:
        firing = self._firing
        if firing:
            firing.difference_update([timer for timer in firing if timer[3] == key_group])
        super().replace_key_group(key_group, timers)

    def key_groups(self) -> list[int]:
        return sorted(set(super().key_groups()) | {timer[3] for timer in self._firing})

    def count(self, key_group: Optional[int] = None) -> int:
        firing = self._firing
        taken = len(firing) if key_group is None else sum(1 for timer in firing if timer[3] == key_group)
        return super().count(key_group) + taken

    def __iter__(self) -> Iterator[InternalTimer]:
        for key_group in sorted(set(self.queues) | {timer[3] for timer in self._firing}):
            yield from self.timers_of(key_group)


_FIRST_POPS = 32
_timestamp_of = itemgetter(0)


def _sort_timers(timers: list[InternalTimer]) -> None:
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


def _take_due_of_queue(queue: HeapTimerQueue, limit: int, taken: list[InternalTimer]) -> None:
    """Append the due timers of one key group to ``taken`` and remove them from the queue.

    Pops one by one while few are due (O(log n) each); once the number popped is a quarter of what is left, one
    linear pass partitions the rest, so the cost stays within a constant factor of popping and is far lower for
    large backlogs.
    """
    heap = queue.heap
    live = queue.live
    popped = 0
    while heap and heap[0][0] <= limit:
        if popped >= _FIRST_POPS and 4 * popped >= len(live):
            due_now = [timer for timer in live if timer[0] <= limit]
            live.difference_update(due_now)
            taken += due_now
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
