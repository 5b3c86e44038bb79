"""1,000,000 timers over 100,000 keys: register, snapshot, restore (RocksDB), watermark to the maximum.

Every timer fires exactly once, in non-decreasing timestamp order, and the restored RocksDB timer service keeps only
the heads of its key groups in memory (it does not load a million timers to restore them).
"""

from __future__ import annotations

import random

import pytest
from timer_helpers import Setup, snapshot_restore

from keyedstate.state.base.layout import VOID_NAMESPACE
from timers import MAX_WATERMARK, InternalTimerService, TimeDomain

KEYS = 100_000
TIMERS_PER_KEY = 10


class CountingTrigger:
    """Checks order and exactly-once on the fly (so a million firings need no list of a million records)."""

    def __init__(self, backend):
        self.backend = backend
        self.last = -1
        self.count = 0
        self.out_of_order = 0
        self.seen: set[tuple[int, str]] = set()
        self.wrong_key = 0

    def on_event_time(self, timer):
        if timer.timestamp < self.last:
            self.out_of_order += 1
        self.last = timer.timestamp
        self.count += 1
        key = self.backend.get_current_key()
        if key != timer.key:
            self.wrong_key += 1
        self.seen.add((timer.timestamp, key))

    def on_processing_time(self, timer):  # pragma: no cover - none registered
        raise AssertionError("no processing-time timer was registered")


@pytest.mark.slow
def test_a_million_timers_survive_a_rocksdb_snapshot_and_fire_exactly_once_in_order(tmp_path):
    setup = Setup("rocksdb", tmp_path, cache_capacity=128)
    try:
        backend = setup.backend()
        service = InternalTimerService(backend, storage="rocksdb")
        rng = random.Random(42)
        expected_checksum = 0
        for k in range(KEYS):
            key = f"user-{k}"
            backend.set_current_key(key)
            timestamps = rng.sample(range(10_000_000), TIMERS_PER_KEY)  # distinct per key
            if k == 7:
                user_7 = timestamps
            for ts in timestamps:
                service.register_event_time_timer(VOID_NAMESPACE, ts)
                expected_checksum += ts
        # registering an existing timer again (here the head, which is cached) must not add a timer
        head = service.earliest_timer(TimeDomain.EVENT_TIME)
        backend.set_current_key(head.key)
        service.register_event_time_timer(VOID_NAMESPACE, head.timestamp)
        backend.set_current_key("user-7")  # and a timer far behind the cached heads
        service.register_event_time_timer(VOID_NAMESPACE, max(user_7))

        (restored,) = snapshot_restore(setup, backend, service)
        backend.close()
        trigger = CountingTrigger(restored)
        service2 = InternalTimerService(restored, trigger, storage="rocksdb")
        cached = sum(len(q.cache) for q in service2._event.queue.queues.values())
        assert cached <= 128 * 128  # only the heads of the 128 key groups are in memory
        assert service2.num_event_time_timers() == KEYS * TIMERS_PER_KEY

        assert service2.advance_watermark(MAX_WATERMARK) == KEYS * TIMERS_PER_KEY
        assert trigger.count == KEYS * TIMERS_PER_KEY
        assert len(trigger.seen) == KEYS * TIMERS_PER_KEY  # exactly once: no (timestamp, key) twice
        assert sum(ts for ts, _ in trigger.seen) == expected_checksum
        assert trigger.out_of_order == 0 and trigger.wrong_key == 0
        assert service2.num_event_time_timers() == 0
    finally:
        setup.close()

