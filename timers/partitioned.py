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
from typing import Any, Callable, Generator, Iterable, Iterator, Optional

from timers.timer import TimerTuple

__all__ = ["KeyGroupPartitionedTimerQueue"]

HEADS_SLACK = 64  # ``heads`` is rebuilt once it holds this many entries more than two per key group


class KeyGroupPartitionedTimerQueue:
    """The timers of one time domain over all owned key groups.

    ``factory(key_group)`` creates the queue of a key group on first use; queues must provide ``add`` (returning
    whether the timer became the head), ``remove``, ``peek``, ``pop``, ``clear``, ``__len__`` and ascending
    ``__iter__``.
    """

    __slots__ = ("_factory", "queues", "_heads", "batch")

    def __init__(self, factory: Callable[[int], Any]) -> None:
        self._factory = factory
        self.queues: dict[int, Any] = {}
        self._heads: list[TimerTuple] = []
        # The sorted timers being fired, taken out of their key groups (see HeapPartitionedTimerQueue); None while
        # not firing, always here: this queue fires one timer at a time, from the key groups.
        self.batch: Optional[list[TimerTuple]] = None

    def queue(self, key_group: int) -> Any:
        """The queue of ``key_group``, created when missing."""
        queue = self.queues.get(key_group)
        if queue is None:
            queue = self.queues[key_group] = self._factory(key_group)
            head = queue.peek()  # a column queue may already hold restored timers
            if head is not None:
                heappush(self._heads, head)
        return queue

    def add(self, timer: TimerTuple) -> None:
        """Register ``timer`` (a no-op when it is registered already)."""
        queue = self.queues.get(timer[3])
        if queue is None:
            queue = self.queue(timer[3])
        if queue.add(timer):
            heads = self._heads
            heappush(heads, timer)
            if len(heads) > 2 * len(self.queues) + HEADS_SLACK:
                self.rebuild_heads()

    def remove(self, timer: TimerTuple) -> bool:
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

    def remove_many(self, timers: list[TimerTuple], key_group: int) -> None:
        """Delete ``timers``, all of ``key_group`` (unknown ones are ignored)."""
        queue = self.queues.get(key_group)
        if queue is not None and queue.remove_many(timers):
            head = queue.peek()
            if head is not None:
                heappush(self._heads, head)

    def apply_changes(self, changes: dict[int, bool], prefix: bytes, namespace: bytes, key_group: int) -> None:
        """Register (True) or delete (False) the timer ``(timestamp, prefix, namespace, key_group)`` for every
        ``timestamp -> registered`` of ``changes``: one key's collected timer calls (see ``TimerService``).

        The only definition; the compiled ``TimerFlush`` (``keyedstate/_fastpath_src/timer_flush.c``) is the
        branch over a set of the key group's timers (``live``: a heap queue's, or a column queue's that holds its
        timers unwritten) in C.
        """
        queue = self.queues.get(key_group)
        if queue is None:
            if True not in changes.values():
                return  # only deletions, and the key group has no timers
            queue = self.queue(key_group)
        live = getattr(queue, "live", None)
        if live is not None and not self._unfired():
            # The key group's timers are a set in memory, not firing: a key that registers and deletes timers within
            # one run leaves deletions of timers that were never queued and registrations of timers already queued;
            # one set lookup settles each.
            for timestamp, registered in changes.items():
                timer = (timestamp, prefix, namespace, key_group)
                if registered:
                    if timer not in live:
                        self.add(timer)
                elif timer in live:
                    self.remove(timer)
            return
        # Otherwise every timestamp occurs once, so the order does not matter and the deletions go to the queue
        # together (a column queue looks the uncached ones up in one read).
        add = self.add
        deletions = []
        for timestamp, registered in changes.items():
            if registered:
                add((timestamp, prefix, namespace, key_group))
            else:
                deletions.append((timestamp, prefix, namespace, key_group))
        if len(deletions) == 1:
            self.remove(deletions[0])
        elif deletions:
            self.remove_many(deletions, key_group)

    def _unfired(self) -> list[TimerTuple]:
        """Due timers taken out of their key groups to be fired and not fired yet, ascending: still registered, so
        every view below includes them. None here; see :class:`~timers.heap_partitioned.HeapPartitionedTimerQueue`."""
        return []

    def peek(self) -> Optional[TimerTuple]:
        """The earliest timer over all key groups, or None."""
        heads = self._heads
        queues = self.queues
        head = None
        while heads:
            entry = heads[0]
            head = queues[entry[3]].peek()
            if head is entry or head == entry:
                break
            head = None
            heappop(heads)  # stale: the key group's real head is in ``heads`` too
        unfired = self._unfired()
        if unfired and (head is None or unfired[0] < head):
            return unfired[0]
        return head

    def pop_due(self, limit: int) -> Optional[TimerTuple]:
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

    def rebuild_heads(self) -> None:
        """Rebuild ``heads`` from the queues (also after ``queues`` was filled directly, as a restore does)."""
        heads = self._heads
        heads[:] = [head for head in (q.peek() for q in self.queues.values()) if head is not None]
        heapify(heads)  # in place: a running ``due`` generator keeps using the same list

    def due(self, limit: int) -> Generator[TimerTuple, None, None]:
        """Pop and yield, one by one, every timer with timestamp <= ``limit`` in ascending order.

        Timers added between two steps (by the callback of the previous timer) are seen by the next step.
        """
        pop_due = self.pop_due
        while True:
            timer = pop_due(limit)
            if timer is None:
                return
            yield timer

    def earliest(self, key_group: int) -> Optional[TimerTuple]:
        """The earliest timer of ``key_group``, or None."""
        queue = self.queues.get(key_group)
        head = None if queue is None else queue.peek()
        taken = [timer for timer in self._unfired() if timer[3] == key_group]
        if taken and (head is None or taken[0] < head):
            return taken[0]
        return head

    def timers_of(self, key_group: int) -> Iterator[TimerTuple]:
        """Every timer of ``key_group``, ascending."""
        queue = self.queues.get(key_group)
        queued = iter(()) if queue is None else iter(queue)
        taken = [timer for timer in self._unfired() if timer[3] == key_group]
        return iter(sorted([*queued, *taken])) if taken else queued

    def replace_key_group(self, key_group: int, timers: Iterable[TimerTuple]) -> None:
        """Make ``timers`` exactly the timers of ``key_group``."""
        for timer in self._unfired():
            if timer[3] == key_group:
                self.remove(timer)
        queue = self.queue(key_group)
        queue.clear()
        for timer in timers:
            queue.add(timer)
        head = queue.peek()
        if head is not None:
            heappush(self._heads, head)

    def forget(self, key_group: int) -> None:
        """Drop the in-memory queue of ``key_group`` (its stored timers stay where they are stored)."""
        if self.queues.pop(key_group, None) is not None:
            self.rebuild_heads()

    def key_groups(self) -> list[int]:
        """Key groups that have at least one timer, ascending."""
        queued = {kg for kg, queue in self.queues.items() if queue.peek() is not None}
        return sorted(queued.union(timer[3] for timer in self._unfired()))

    def count(self, key_group: Optional[int] = None) -> int:
        """Number of timers (of one key group, or all)."""
        unfired = self._unfired()
        if key_group is not None:
            queue = self.queues.get(key_group)
            return (0 if queue is None else len(queue)) + sum(1 for timer in unfired if timer[3] == key_group)
        return sum(len(queue) for queue in self.queues.values()) + len(unfired)

    def __iter__(self) -> Iterator[TimerTuple]:
        """Every timer, ascending by key group, then timestamp."""
        for key_group in sorted(set(self.queues).union(timer[3] for timer in self._unfired())):
            yield from self.timers_of(key_group)
