"""Bulk firing of the heap queue (``HeapPartitionedTimerQueue.due``) behaves exactly like popping one by one.

The reference is the generic partitioned queue over the same heap queues, which pops one timer per step. Callbacks
register, delete and re-register timers (some due before the next taken one), advance time again (a nested call),
and sometimes raise.
"""

from __future__ import annotations

import random

import pytest

from keyedstate.serialization import encode_key
from keyedstate.state.base.layout import VOID_NAMESPACE, key_group_prefix
from timers import HeapPartitionedTimerQueue, HeapTimerQueue, KeyGroupPartitionedTimerQueue, make_timer
from timers.queue import sort_timers


def timer(ts, key, key_group):
    return make_timer(ts, key_group_prefix(key_group) + encode_key(key), VOID_NAMESPACE)


def queue_holding(*timers) -> HeapPartitionedTimerQueue:
    queue = HeapPartitionedTimerQueue()
    for item in timers:
        queue.add(item)
    return queue


class Boom(Exception):
    pass


def run_scenario(queue, seed):
    """Register timers, then advance in steps; each fired timer triggers random registrations and deletions."""
    rng = random.Random(seed)
    pool = [timer(rng.randrange(0, 400), f"k{rng.randrange(60)}", rng.randrange(6)) for _ in range(300)]
    for item in pool:
        queue.add(item)
    fired = []
    for limit in (50, 50, 180, 400, 10**6):
        steps = queue.due(limit)
        try:
            for item in steps:
                fired.append(item)
                action = rng.random()
                if action < 0.25:  # register one due before most taken timers
                    queue.add(timer(item[0] + rng.randrange(0, 5), f"n{rng.randrange(40)}", rng.randrange(6)))
                elif action < 0.45:  # delete a registered timer, possibly one taken and not fired yet
                    queue.remove(rng.choice(pool))
                elif action < 0.55:  # re-register a timer that may be pending
                    queue.add(rng.choice(pool))
                elif action < 0.57:
                    raise Boom
                elif action < 0.62:  # a callback advancing time again, possibly less far than this advance
                    fired.append(("nested", list(queue.due(item[0] + rng.randrange(-5, 40)))))
                fired.append(("count", queue.count()))
        except Boom:
            fired.append("boom")
        finally:
            steps.close()
        fired.append(("after", limit, queue.count(), sorted(queue)))
    return fired


@pytest.mark.parametrize("seed", range(40))
def test_bulk_firing_equals_one_by_one(seed):
    reference = KeyGroupPartitionedTimerQueue(lambda key_group: HeapTimerQueue())
    assert run_scenario(HeapPartitionedTimerQueue(), seed) == run_scenario(reference, seed)


def test_a_timer_deleted_by_a_callback_before_its_turn_does_not_fire():
    first, second, third = timer(1, "a", 0), timer(2, "b", 1), timer(3, "c", 2)
    queue = queue_holding(first, second, third)
    fired = []
    for item in queue.due(10):
        fired.append(item)
        if item == first:
            queue.remove(third)
            assert queue.count() == 1  # only ``second`` is still pending
    assert fired == [first, second] and queue.count() == 0


def test_timers_left_after_a_callback_raises_fire_at_the_next_advance_in_order():
    timers = [timer(ts, f"k{ts}", ts % 5) for ts in range(100)]
    queue = queue_holding(*reversed(timers))
    steps = queue.due(1000)
    assert [next(steps) for _ in range(10)] == timers[:10]
    steps.close()  # what happens when the callback of the tenth timer raises
    assert queue.count() == 90 and queue.peek() == timers[10]
    assert list(queue.due(1000)) == timers[10:]


def test_pending_taken_timers_are_visible_to_inspection_during_firing():
    timers = [timer(ts, "k", 7) for ts in (5, 6, 7)]
    queue = queue_holding(*timers)
    steps = queue.due(10)
    assert next(steps) == timers[0]
    assert queue.count(7) == 2 and list(queue.timers_of(7)) == timers[1:] and queue.earliest(7) == timers[1]
    assert queue.key_groups() == [7] and list(queue) == timers[1:] and queue.peek() == timers[1]
    assert list(steps) == timers[1:]


def test_sorting_breaks_timestamp_ties_by_key_group_key_and_namespace():
    rng = random.Random(3)
    timers = [timer(rng.randrange(4), f"k{rng.randrange(50)}", rng.randrange(9)) for _ in range(2000)]
    timers = list(dict.fromkeys(timers))
    shuffled = timers[:]
    rng.shuffle(shuffled)
    sort_timers(shuffled)
    assert shuffled == sorted(timers)


def test_a_taken_timer_held_back_for_an_earlier_callback_timer_can_be_deleted_and_registered_again():
    """A callback registers a timer due before the next taken one; that timer's own callback deletes (and in the
    second run re-registers) the held-back taken timer."""
    for register_again in (False, True):
        first, held, last = timer(1, "a", 0), timer(5, "b", 1), timer(9, "c", 2)
        inserted = timer(3, "d", 3)
        queue = queue_holding(first, held, last)
        fired = []
        for item in queue.due(10):
            fired.append(item)
            if item == first:
                queue.add(inserted)
            elif item == inserted:
                assert queue.remove(held) and not queue.remove(held)
                if register_again:
                    queue.add(held)
                    queue.add(held)  # registering twice is still one timer
                assert queue.count() == (2 if register_again else 1)
        expected = [first, inserted, held, last] if register_again else [first, inserted, last]
        assert fired == expected and queue.count() == 0


def test_a_nested_advance_fires_the_outer_advances_pending_timers_in_order_and_only_once():
    first, second, third = timer(1, "a", 0), timer(5, "b", 0), timer(7, "c", 0)
    queue = queue_holding(first, second, third)
    fired = []
    for item in queue.due(5):
        fired.append(item)
        if item == first:
            fired.append(list(queue.due(10)))  # the watermark moved on inside a callback
    assert fired == [first, [second, third]] and queue.count() == 0


def test_a_nested_advance_while_a_taken_timer_is_held_back_fires_it_once():
    first, held = timer(1, "a", 0), timer(5, "b", 1)
    inserted = timer(3, "c", 2)
    queue = queue_holding(first, held)
    fired = []
    for item in queue.due(10):
        fired.append(item)
        if item == first:
            queue.add(inserted)  # due before ``held``: ``held`` waits while ``inserted`` fires
        elif item == inserted:
            fired.append(list(queue.due(4)))  # fires nothing: ``held`` is at 5
    assert fired == [first, inserted, [], held] and queue.count() == 0


def test_pop_due_during_firing_returns_the_next_pending_timer():
    first, second = timer(1, "a", 0), timer(2, "b", 0)
    queue = queue_holding(first, second)
    fired = []
    for item in queue.due(5):
        fired.append(item)
        fired.append(queue.pop_due(5))
    assert fired == [first, second] and queue.count() == 0
