"""The timer queues against a model (a Python set): set semantics, removal, order, the head cache of RocksDB."""

from __future__ import annotations

import random
import re

import pytest

from keyedstate.serialization import encode_key
from keyedstate.state.base.layout import VOID_NAMESPACE, key_group_prefix
from keyedstate.state.heap.stores import HeapRawColumn
from timers import ColumnTimerQueue, HeapTimerQueue, KeyGroupPartitionedTimerQueue, make_timer
from timers.codec import decode_record, encode_record, encode_records
from timers.column_queue import COMPLETE_GROWTH
from timers.queue import COMPACT_SLACK

NAMESPACES = [VOID_NAMESPACE, encode_key("w1")]


def timer(ts, key, key_group=3, namespace=VOID_NAMESPACE):
    return make_timer(ts, key_group_prefix(key_group) + encode_key(key), namespace)


@pytest.fixture(params=["heap-column", "rocksdb-column"])
def column(request, tmp_path):
    if request.param == "heap-column":
        yield HeapRawColumn("t")
        return
    from keyedstate.state.rocksdb import RocksDBKeyedStateBackend

    backend = RocksDBKeyedStateBackend(tmp_path / "db")
    yield backend.raw_column("_timer_state/test")
    backend.close()


def test_heap_queue_has_set_semantics_and_pops_in_order():
    queue = HeapTimerQueue()
    assert queue.add(timer(5, "a")) is True  # first: the head
    assert queue.add(timer(5, "a")) is False
    assert queue.add(timer(7, "a")) is False
    assert queue.add(timer(1, "b")) is True
    assert len(queue) == 3
    assert queue.remove(timer(9, "zzz")) is False
    assert queue.remove(timer(7, "a")) is True
    assert [t.timestamp for t in queue] == [1, 5]
    assert queue.pop().timestamp == 1 and queue.pop().timestamp == 5 and queue.pop() is None


def test_heap_queue_compacts_stale_entries():
    queue = HeapTimerQueue(timer(i, "k") for i in range(1000))
    for i in range(1, 1000):  # never the head, so deletion is lazy
        queue.remove(timer(i, "k"))
    assert len(queue) == 1
    assert len(queue.heap) < 200  # stale entries were dropped
    assert queue.pop().timestamp == 0 and queue.pop() is None


def _exercise(queue, model, rng, steps, key_groups=(3,)):
    """Random add / remove / pop against a model set; checks every answer, the head and the size."""
    partitioned = isinstance(queue, KeyGroupPartitionedTimerQueue)
    for _ in range(steps):
        op = rng.random()
        t = timer(rng.randrange(60), f"k{rng.randrange(12)}", rng.choice(key_groups), rng.choice(NAMESPACES))
        if op < 0.5:
            queue.add(t)
            model.add(t)
        elif op < 0.6:
            # several of one key group at once (a key's coalesced deletes): heads, queued and unknown timers
            key_group = rng.choice(key_groups)
            mine = sorted(x for x in model if x.key_group == key_group)
            chosen = {timer(rng.randrange(60), f"k{rng.randrange(12)}", key_group) for _ in range(2)}
            chosen.update(mine[:rng.randrange(3)] + rng.sample(mine, min(len(mine), 2)))
            chosen = sorted(chosen)
            if partitioned:
                queue.remove_many(chosen, key_group)
            else:
                assert queue.remove_many(chosen) == (bool(mine) and mine[0] in chosen)
            model.difference_update(chosen)
        elif op < 0.75:
            if model and rng.random() < 0.5:
                t = rng.choice(sorted(model)[:3])  # often a head, which moves the key group's minimum
            assert queue.remove(t) == (t in model)
            model.discard(t)
        else:
            expected = min(model) if model else None
            assert queue.peek() == expected
            if partitioned:
                limit = rng.randrange(70)
                got = queue.pop_due(limit)
                assert got == (expected if expected is not None and expected.timestamp <= limit else None)
            else:
                got = queue.pop()
                assert got == expected
            model.discard(got)
        assert (queue.count() if partitioned else len(queue)) == len(model)
    in_order = sorted(model, key=lambda t: (t.key_group, t)) if partitioned else sorted(model)
    assert list(queue) == in_order


@pytest.mark.parametrize("seed", range(5))
def test_heap_queue_matches_a_model(seed):
    _exercise(HeapTimerQueue(), set(), random.Random(seed), 3000)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("capacity", [1, 3, 16])
def test_column_queue_matches_a_model_and_writes_through(column, seed, capacity):
    queue = ColumnTimerQueue(column, 3, capacity)
    model = set()
    _exercise(queue, model, random.Random(seed), 1500)
    assert len(queue.cache) <= (capacity * COMPLETE_GROWTH if queue.complete else capacity)
    queue.flush_deletes()  # deletes of popped timers may be deferred (coalesced into range deletes)
    stored = sorted(decode_record(k, v) for k, v in column.items())
    assert stored == sorted(model)  # the column holds exactly the live timers
    # a new queue over the same column (a restore) sees the same timers, in order
    reopened = ColumnTimerQueue(column, 3, capacity)
    assert list(reopened) == sorted(model) and len(reopened) == len(model)
    assert [reopened.pop() for _ in range(len(model))] == sorted(model) and reopened.pop() is None


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("capacity", [1, 3, 16])
def test_a_queue_deferring_its_writes_matches_the_model_and_leaves_the_column_as_writing_through_does(
        column, seed, capacity):
    queue = ColumnTimerQueue(column, 3, capacity)
    queue.peek()
    queue.defer_writes()
    model = set()
    _exercise(queue, model, random.Random(seed), 1500)
    queue.flush_deletes()
    assert sorted(decode_record(k, v) for k, v in column.items()) == sorted(model)
    reopened = ColumnTimerQueue(column, 3, capacity)
    assert list(reopened) == sorted(model) and len(reopened) == len(model)


@pytest.mark.parametrize("seed", range(5))
def test_held_timers_answer_as_the_model_until_written_and_are_written_exactly(column, seed):
    """A new key group's queue (defer_writes) holds its timers as a heap over a set: heads deleted, timers deleted
    and registered again, more deleted timers than live ones; nothing reaches the column before the flush."""
    rng = random.Random(seed)
    queue = ColumnTimerQueue(column, 3, 4)  # holds up to 4 * COMPLETE_GROWTH timers: more than the 200 used here
    queue.peek()
    queue.defer_writes()
    model: set = set()
    for _ in range(4000):
        t = timer(rng.randrange(40), f"k{rng.randrange(5)}")
        op = rng.random()
        if op < 0.45:
            assert queue.add(t) == (t not in model and (not model or t < min(model)))  # whether it became the head
            model.add(t)
        elif op < 0.85:
            if model and rng.random() < 0.6:
                t = min(model)  # the head, often: the next one must surface
            assert queue.remove(t) == (t in model)
            model.discard(t)
        else:
            chosen = sorted({t, *rng.sample(sorted(model), min(len(model), 2))})
            assert queue.remove_many(chosen) == (bool(model) and min(model) in chosen)
            model.difference_update(chosen)
        assert queue.peek() == (min(model) if model else None)
        assert len(queue) == len(model) and (t in queue) == (t in model)
        assert len(queue._held.heap) <= 2 * len(model) + COMPACT_SLACK  # deleted timers do not pile up
    assert queue.live == model and list(column.items()) == []
    assert queue.flush_deletes() is bool(model)
    assert queue.live is None and sorted(decode_record(k, v) for k, v in column.items()) == sorted(model)
    assert [queue.pop() for _ in range(len(model))] == sorted(model) and queue.pop() is None


def test_a_key_group_known_to_start_empty_writes_its_timers_in_one_batch_at_the_flush(column):
    queue = ColumnTimerQueue(column, 3, 4)
    queue.peek()
    queue.defer_writes()
    for i in range(40):
        queue.add(timer(1_000 + i, f"k{i}"))
        queue.remove_many([timer(2_000 + i, f"k{i}")])  # never registered
        if i % 2:
            assert queue.remove(timer(1_000 + i - 1, f"k{i - 1}")) is True
    assert list(column.items()) == []  # nothing written yet
    assert len(queue) == 20 and queue.peek() == timer(1_001, "k1")
    assert queue.flush_deletes() is True
    kept = [timer(1_000 + i, f"k{i}") for i in range(1, 40, 2)]
    assert sorted(decode_record(k, v) for k, v in column.items()) == kept
    queue.add(timer(999, "late"))  # written through from now on
    assert decode_record(*next(iter(column.items()))) == timer(999, "late")


def test_a_pop_or_outgrowing_the_cache_writes_the_deferred_timers_first(column):
    popped = ColumnTimerQueue(column, 3, 2)
    popped.peek()
    popped.defer_writes()
    timers = [timer(i, f"k{i}") for i in range(10)]
    for t in timers:
        popped.add(t)
    assert popped.pop() == timers[0]
    popped.flush_deletes()
    assert sorted(decode_record(k, v) for k, v in column.items()) == timers[1:]
    assert [popped.pop() for _ in range(9)] == timers[1:]
    popped.flush_deletes()
    assert list(column.items()) == []

    grown = ColumnTimerQueue(column, 3, 2)
    grown.peek()
    grown.defer_writes()
    many = [timer(i, f"k{i}") for i in range(2 * COMPLETE_GROWTH + 1)]
    for t in many:
        grown.add(t)
    assert not grown.complete and len(grown.cache) == 2
    assert sorted(decode_record(k, v) for k, v in column.items()) == many  # all written before the cache shrank
    assert len(grown) == len(many)


def test_only_a_queue_without_timers_defers_its_writes(column):
    queue = ColumnTimerQueue(column, 3, 4)
    queue.add(timer(1, "a"))
    with pytest.raises(ValueError, match="starts empty"):
        queue.defer_writes()


def test_column_queue_coalesces_the_deletes_of_consecutive_pops(column):
    for i in range(10):
        key, value = encode_record(timer(i, "k"))
        column.put(key, value)
    queue = ColumnTimerQueue(column, 3, 4)
    assert [queue.pop().timestamp for _ in range(6)] == list(range(6))
    queue.add(timer(2, "k"))  # another operation first applies the deferred deletes, then writes
    assert sorted(decode_record(k, v).timestamp for k, v in column.items()) == [2, 6, 7, 8, 9]
    assert [queue.pop().timestamp for _ in range(3)] == [2, 6, 7]
    queue.flush_deletes()
    assert sorted(decode_record(k, v).timestamp for k, v in column.items()) == [8, 9]
    reopened = ColumnTimerQueue(column, 3, 4)
    assert list(reopened) == [timer(8, "k"), timer(9, "k")]


def test_column_queue_loads_only_its_head_cache(column):
    for i in range(1000):
        key, value = encode_record(timer(i, f"k{i % 50}"))
        column.put(key, value)
    queue = ColumnTimerQueue(column, 3, 8)
    assert queue.peek().timestamp == 0
    assert len(queue.cache) == 8 and not queue.complete
    queue.add(timer(500, "x"))  # beyond the cache: only written to the column
    assert len(queue.cache) == 8
    assert queue.remove(timer(600, "k0")) is True  # an uncached timer is found and deleted in the column
    assert queue.remove(timer(601, "k0")) is False
    assert len(queue) == 1000
    assert [queue.pop().timestamp for _ in range(10)] == list(range(10))
    assert len(queue.cache) <= 8


class CountingReads:
    """A real column that counts the reads made through it."""

    def __init__(self, column):
        self.column = column
        self.reads = 0

    def get(self, key):
        self.reads += 1
        return self.column.get(key)

    def get_many(self, keys):
        self.reads += 1
        return self.column.get_many(keys)

    def __getattr__(self, name):
        return getattr(self.column, name)


def test_a_key_group_that_starts_empty_registers_and_deletes_without_reading_its_column(column):
    """Its cache keeps every timer while it holds them all (the first call of a key group, a backlog caught up): a
    key that deletes the timer of its previous element and registers the next one costs no lookup."""
    counting = CountingReads(column)
    queue = ColumnTimerQueue(counting, 3, 4)
    assert queue.peek() is None and queue.complete  # the one scan, of an empty column
    counting.reads = 0
    for i in range(50):
        queue.add(timer(1_000 + i, f"k{i}"))
        queue.remove_many([timer(2_000 + i, f"k{i}"), timer(2_001 + i, f"k{i}")])  # never registered
        queue.remove(timer(1_000 + i - 1, f"k{i - 1}") if i % 2 else timer(9_999, "never"))
    assert counting.reads == 0
    assert queue.complete and len(queue.cache) == len(queue) == 25
    kept = sorted(timer(1_000 + i, f"k{i}") for i in range(50) if i % 2 or i == 49)
    assert sorted(decode_record(k, v) for k, v in column.items()) == kept  # written through all along


def test_a_grown_cache_fires_in_order_from_a_short_list_and_reads_the_column_in_batches(column):
    queue = ColumnTimerQueue(column, 3, 4)
    timers = [timer(5_000 - i, f"k{i}") for i in range(30)]
    for t in timers:
        queue.add(t)
    assert len(queue.cache) == 30 and queue.complete
    assert queue.pop() == min(timers)
    assert len(queue.cache) == 3 and not queue.complete  # shrunk to its capacity, the rest stays in the column
    assert [queue.pop() for _ in range(29)] == sorted(timers)[1:] and queue.pop() is None
    queue.flush_deletes()
    assert list(column.items()) == []


def test_past_its_growth_limit_the_cache_keeps_the_smallest_timers_and_looks_the_rest_up(column):
    counting = CountingReads(column)
    queue = ColumnTimerQueue(counting, 3, 2)
    limit = 2 * COMPLETE_GROWTH
    timers = [timer(i, f"k{i}") for i in range(limit + 1)]
    for t in reversed(timers):
        queue.add(t)
    assert not queue.complete and queue.cache == timers[:2]
    counting.reads = 0
    assert queue.remove(timers[-1]) is True and counting.reads == 1  # beyond the cache: only the column knows
    assert len(queue) == limit
    assert [queue.pop() for _ in range(limit)] == timers[:-1]


@pytest.mark.parametrize("storage", ["heap", "column"])
@pytest.mark.parametrize("seed", range(4))
def test_key_group_partitioned_queue_finds_the_global_minimum(storage, seed):
    column = HeapRawColumn("t")
    factory = (lambda kg: HeapTimerQueue()) if storage == "heap" else (lambda kg: ColumnTimerQueue(column, kg, 2))
    queue = KeyGroupPartitionedTimerQueue(factory)
    model = set()
    rng = random.Random(seed)
    _exercise(queue, model, rng, 4000, key_groups=(0, 1, 5, 77, 127))
    assert queue.count() == len(model)
    for key_group in (0, 1, 5, 77, 127):
        mine = sorted(t for t in model if t.key_group == key_group)
        assert list(queue.timers_of(key_group)) == mine
        assert queue.earliest(key_group) == (mine[0] if mine else None)
    drained = []
    while (t := queue.pop_due(10**9)) is not None:
        drained.append(t)
    assert drained == sorted(model)


def test_deleting_a_key_groups_head_exposes_its_next_timer_as_the_global_minimum():
    for factory in (lambda kg: HeapTimerQueue(), lambda kg: ColumnTimerQueue(HeapRawColumn("t"), kg, 2)):
        queue = KeyGroupPartitionedTimerQueue(factory)
        for t in (timer(1, "a", 1), timer(2, "a", 1), timer(5, "b", 2)):
            queue.add(t)
        assert queue.remove(timer(1, "a", 1))
        assert queue.peek() == timer(2, "a", 1)
        assert queue.pop_due(10) == timer(2, "a", 1) and queue.pop_due(10) == timer(5, "b", 2)
        # a key group replaced wholesale: its new head is found, old entries are ignored
        queue.add(timer(7, "c", 3))
        queue.replace_key_group(3, [timer(9, "d", 3), timer(8, "d", 3)])
        assert queue.pop_due(100) == timer(8, "d", 3) and queue.pop_due(100) == timer(9, "d", 3)
        assert queue.pop_due(100) is None and queue.peek() is None


def test_key_group_partitioned_queue_bounds_stale_heads():
    queue = KeyGroupPartitionedTimerQueue(lambda kg: HeapTimerQueue())
    for i in range(5000, 0, -1):  # every add is a new head of key group 1
        queue.add(timer(i, "k", key_group=1))
    assert len(queue._heads) <= 2 * len(queue.queues) + 64 + 1
    assert queue.peek().timestamp == 1


def test_encoding_many_timers_at_once_gives_each_ones_record():
    """encode_records is encode_record inlined for batches: the same bytes, keys of several lengths included."""
    timers = [timer(ts, key, kg, ns) for ts in (-2**63, -1, 0, 7, 2**63 - 1) for key in ("", "k", "a longer key")
              for kg in (0, 3, 32767) for ns in NAMESPACES]
    assert encode_records(timers) == [encode_record(t) for t in timers]
    assert encode_records(iter(timers[:3])) == [encode_record(t) for t in timers[:3]] and encode_records([]) == []


@pytest.mark.compiled_only
def test_the_compiled_record_encoder_is_a_twin_of_the_python_one():
    """``encode_timer_records`` gives encode_record's bytes; a timer it does not encode itself (a timestamp that is
    not a plain int of 64 bits, a key prefix shorter than its key group) goes to encode_record, errors included."""
    from keyedstate.fastpath import fastpath
    from timers.codec import RECORD_FORMAT_VERSION, _encode_records

    assert fastpath is not None

    def compiled(timers):
        return fastpath.encode_timer_records(timers, RECORD_FORMAT_VERSION, encode_record)

    rng = random.Random(5)
    timers = [timer(rng.choice([-2**63, -1, 0, 2**63 - 1, rng.randrange(-2**63, 2**63)]), "k" * rng.randrange(0, 300),
                    rng.randrange(0, 32768), rng.choice(NAMESPACES)) for _ in range(2000)]
    assert compiled(timers) == _encode_records(timers) == [encode_record(t) for t in timers]
    assert compiled(set(timers[:50])) == _encode_records(set(timers[:50])) and compiled(iter(())) == []

    class Stamp(int):
        pass

    odd = [(True, b"\x00\x01k", b""), (Stamp(7), b"\x00\x01k", b""), (7, bytearray(b"\x00\x01k"), b"")]
    assert compiled(odd + timers[:2]) == [encode_record(t) for t in odd + timers[:2]]
    out_of_range = [(2**63, b"\x00\x01k", b""), (-2**63 - 1, b"\x00\x01k", b"")]
    for bad in out_of_range + [(1, b"\x00", b""), (1.5, b"\x00\x01", b"")]:
        with pytest.raises(Exception) as python_error:
            encode_record(bad)
        with pytest.raises(type(python_error.value), match=re.escape(str(python_error.value))):
            compiled(timers[:3] + [bad])
