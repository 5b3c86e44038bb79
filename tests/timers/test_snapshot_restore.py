"""semantics.md item 7 (timers survive snapshot and restore), directly against InternalTimerService, for every timer
storage."""

from __future__ import annotations

import pytest
from timer_helpers import Recorder, at, make, snapshot_restore

from keyedstate.keygroups import KeyGroupRange, key_group_of_key
from keyedstate.keygroups import key_group_of_stored_key as key_group_of
from keyedstate.state.base.layout import VOID_NAMESPACE
from timers import MAX_WATERMARK, MIN_WATERMARK, TimeDomain, decode_record

V = VOID_NAMESPACE


# ---- 7. timers survive snapshot and restore ------------------------------------------------------------------------


def _populate(backend, service, keys=60):
    expected_event, expected_processing = set(), set()
    for i in range(keys):
        key = f"k{i}"
        at(backend, key)
        for ts in (i, i + 100):
            service.register_event_time_timer(V, ts)
            expected_event.add((ts, key))
        service.register_processing_time_timer(V, 1_000 + i)
        expected_processing.add((1_000 + i, key))
    return expected_event, expected_processing


def test_timers_survive_a_snapshot_and_overdue_processing_timers_fire_right_after_restore(setup):
    backend, service, rec = make(setup)
    expected_event, expected_processing = _populate(backend, service)
    service.advance_watermark(9)  # fires (0..9), which must not come back
    fired_before = set(rec.take())
    expected_event -= fired_before
    at(backend, "k20")
    service.delete_event_time_timer(V, 120)  # deleted timers stay deleted
    expected_event.discard((120, "k20"))

    (restored,) = snapshot_restore(setup, backend, service)
    backend2, service2, rec2 = make(setup, restored)
    assert service2.num_event_time_timers() == len(expected_event)
    assert service2.num_processing_time_timers() == len(expected_processing)
    assert service2.current_watermark() == MIN_WATERMARK  # time is not part of a snapshot (as in Flink)
    # every processing-time timer is overdue now: all fire at the first advance after restore
    assert service2.advance_processing_time(10_000) == len(expected_processing)
    assert set(rec2.take()) == expected_processing
    service2.advance_watermark(MAX_WATERMARK)
    fired = rec2.take()
    assert set(fired) == expected_event and len(fired) == len(expected_event)
    assert [ts for ts, _ in fired] == sorted(ts for ts, _ in fired)


def test_a_later_snapshot_contains_the_changes_since_the_previous_one(setup):
    backend, service, rec = make(setup)
    at(backend, "a")
    service.register_event_time_timer(V, 1)
    service.register_event_time_timer(V, 2)
    snapshot_restore(setup, backend, service, checkpoint_id=1)
    service.delete_event_time_timer(V, 1)
    at(backend, "b")
    service.register_event_time_timer(V, 3)
    (restored,) = snapshot_restore(setup, backend, service, checkpoint_id=2)
    _, service2, rec2 = make(setup, restored)
    service2.end_of_input()
    assert sorted(rec2.take()) == [(2, "a"), (3, "b")]


def test_restore_into_other_key_group_ranges_keeps_exactly_the_owned_timers(setup):
    backend, service, rec = make(setup)
    expected_event, expected_processing = _populate(backend, service, keys=200)
    ranges = [KeyGroupRange(0, 41), KeyGroupRange(42, 99), KeyGroupRange(100, 127)]
    restored = snapshot_restore(setup, backend, service, ranges=ranges)
    all_fired = []
    for key_group_range, new_backend in zip(ranges, restored):
        for column in ("_timer_state/event_user-timers", "_timer_state/processing_user-timers"):
            stored = [key_group_of(k) for k, _ in new_backend.raw_column(column).items()]
            assert stored and all(kg in key_group_range for kg in stored)  # the backend kept only owned groups
        _, new_service, new_rec = make(setup, new_backend)
        new_service.end_of_input()
        new_service.advance_processing_time(MAX_WATERMARK)
        fired = new_rec.take()
        assert fired, "every range owns some of the 200 keys"
        assert all(key_group_of_key(key, 128) in key_group_range for _, key in fired)
        all_fired += fired
    assert sorted(all_fired) == sorted(expected_event | expected_processing)


@pytest.mark.parametrize("first, second", [("heap", "rocksdb"), ("rocksdb", "heap")])
def test_a_snapshot_of_one_timer_storage_restores_into_the_other(setup, first, second):
    backend = setup.backend()
    recorder = Recorder(backend)
    service = recorder.bind(setup.service(backend, storage=first))
    expected_event, expected_processing = _populate(backend, service, keys=30)
    (restored,) = snapshot_restore(setup, backend, service)
    recorder = Recorder(restored)
    service2 = recorder.bind(setup.service(restored, storage=second))
    assert service2.num_event_time_timers() == len(expected_event)
    service2.end_of_input()
    service2.advance_processing_time(MAX_WATERMARK)
    assert set(recorder.take()) == expected_event | expected_processing


def test_the_raw_columns_hold_exactly_the_pending_timers_after_an_advance_and_at_snapshots(setup):
    backend, service, rec = make(setup)
    _populate(backend, service, keys=40)
    service.advance_watermark(70)
    service.advance_processing_time(1_010)
    columns = ((TimeDomain.EVENT_TIME, "_timer_state/event_user-timers"),
               (TimeDomain.PROCESSING_TIME, "_timer_state/processing_user-timers"))

    def check():
        for domain, column in columns:
            stored = sorted(decode_record(k, v) for k, v in backend.raw_column(column).items())
            assert stored == sorted(service.timers(domain))
            assert len(stored) == (80 - 40 if domain is TimeDomain.EVENT_TIME else 40 - 11)

    if setup.storage == "rocksdb":
        check()  # written through, and the deferred deletes of fired timers were applied at the end of the advance
    backend.prepare_snapshot()  # heap: the hook writes the changed key groups
    check()
