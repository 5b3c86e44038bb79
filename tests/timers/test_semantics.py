"""semantics.md items 1-6 (timers), directly against InternalTimerService, for every timer storage; item 7 is in
test_snapshot_restore.py, item 8 and what the service hands out in test_service_surface.py."""

from __future__ import annotations

import random
import threading

from timer_helpers import at, make

from keyedstate import ValueStateDescriptor
from keyedstate.serialization import encode_key
from keyedstate.state.base.layout import VOID_NAMESPACE
from timers import MIN_WATERMARK, TimeDomain

V = VOID_NAMESPACE


# ---- 1. identity, de-duplication, silent deletes -----------------------------------------------------------------


def test_registering_the_same_timer_twice_fires_once(setup):
    backend, service, rec = make(setup)
    at(backend, "a")
    service.register_event_time_timer(V, 10)
    service.register_event_time_timer(V, 10)
    service.register_processing_time_timer(V, 10)
    service.register_processing_time_timer(V, 10)
    assert service.num_event_time_timers() == 1
    assert service.num_processing_time_timers() == 1
    assert service.advance_watermark(100) == 1
    assert service.advance_processing_time(100) == 1
    assert [(f.domain, f.timestamp, f.key) for f in rec.fired] == [
        (TimeDomain.EVENT_TIME, 10, "a"),
        (TimeDomain.PROCESSING_TIME, 10, "a"),
    ]


def test_same_timestamp_different_keys_or_namespaces_fire_separately(setup):
    backend, service, rec = make(setup)
    for key in ("a", "b", 7, ("t", 1)):
        at(backend, key)
        service.register_event_time_timer(V, 10)
    at(backend, "a")
    service.register_event_time_timer(encode_key("window-1"), 10)
    assert service.num_event_time_timers() == 5
    service.advance_watermark(10)
    fired = sorted(((repr(f.key), f.namespace) for f in rec.fired))
    assert fired == sorted(
        [(repr(k), V) for k in ("a", "b", 7, ("t", 1))] + [(repr("a"), encode_key("window-1"))]
    )


def test_deleting_a_timer_that_is_not_registered_is_a_silent_no_op(setup):
    backend, service, rec = make(setup)
    at(backend, "a")
    service.register_event_time_timer(V, 10)
    service.delete_event_time_timer(V, 11)  # other timestamp
    service.delete_processing_time_timer(V, 10)  # other domain
    service.delete_event_time_timer(encode_key("ns"), 10)  # other namespace
    at(backend, "b")
    service.delete_event_time_timer(V, 10)  # other key
    service.delete_event_time_timer(V, 10)  # twice
    assert service.num_event_time_timers() == 1
    service.advance_watermark(10)
    assert rec.take() == [(10, "a")]
    at(backend, "a")
    service.delete_event_time_timer(V, 10)  # already fired
    assert service.num_event_time_timers() == 0


def test_a_deleted_timer_does_not_fire_and_can_be_registered_again(setup):
    backend, service, rec = make(setup)
    for key in "abcdef":
        at(backend, key)
        service.register_event_time_timer(V, 5)
        service.register_event_time_timer(V, 20)
    at(backend, "c")
    service.delete_event_time_timer(V, 5)
    service.delete_event_time_timer(V, 20)
    at(backend, "d")
    service.delete_event_time_timer(V, 5)
    service.register_event_time_timer(V, 5)  # deleted, then registered again: fires once
    assert service.num_event_time_timers() == 10
    service.advance_watermark(100)
    fired = rec.take()
    assert sorted(fired) == sorted([(5, k) for k in "abdef"] + [(20, k) for k in "abdef"])


# ---- 2. event-time timers fire at timestamp <= watermark, ascending -----------------------------------------------


def test_event_time_timers_fire_when_the_watermark_reaches_them(setup):
    backend, service, rec = make(setup)
    at(backend, "k")
    for ts in (10, 11, 0):
        service.register_event_time_timer(V, ts)
    assert service.advance_watermark(9) == 1  # only ts 0
    assert rec.take() == [(0, "k")]
    assert service.advance_watermark(10) == 1
    assert rec.take() == [(10, "k")]
    assert service.num_event_time_timers() == 1
    assert service.advance_watermark(11) == 1
    assert rec.take() == [(11, "k")]


def test_event_time_timers_fire_in_ascending_timestamp_order_over_keys_and_key_groups(setup):
    backend, service, rec = make(setup)
    rng = random.Random(7)
    expected = set()
    for i in range(400):
        key = f"key-{i % 97}"
        ts = rng.randrange(0, 1000)
        at(backend, key)
        service.register_event_time_timer(V, ts)
        expected.add((ts, key))
    # several partial advances, then the rest
    fired = []
    for watermark in (100, 100, 250, 999):
        service.advance_watermark(watermark)
        batch = rec.take()
        assert all(ts <= watermark for ts, _ in batch)
        fired += batch
    timestamps = [ts for ts, _ in fired]
    assert timestamps == sorted(timestamps)
    assert len(fired) == len(expected) and set(fired) == expected


def test_the_watermark_never_goes_back(setup):
    backend, service, rec = make(setup)
    assert service.current_watermark() == MIN_WATERMARK
    service.advance_watermark(50)
    service.advance_watermark(20)
    assert service.current_watermark() == 50
    at(backend, "k")
    service.register_event_time_timer(V, 30)
    service.advance_watermark(20)  # a smaller watermark still fires what is due at the current one
    assert rec.take() == [(30, "k")]


# ---- 3. an advance fires every due timer before it returns, on the caller's thread ------------------------------


def test_advance_fires_every_due_timer_before_returning_on_the_callers_thread(setup):
    backend, service, rec = make(setup)
    threads = set()
    rec.on_fire = lambda fired, timer: threads.add(threading.get_ident())
    for i in range(50):
        at(backend, i)
        service.register_event_time_timer(V, i)
    assert service.advance_watermark(24) == 25
    assert service.earliest_timer(TimeDomain.EVENT_TIME).timestamp == 25  # nothing due is left behind
    assert threads == {threading.get_ident()}
    assert len(rec.take()) == 25


# ---- 4. registrations during firing and late registrations --------------------------------------------------------


def test_a_timer_registered_in_a_callback_at_or_before_the_watermark_fires_in_the_same_advance(setup):
    backend, service, rec = make(setup)

    def register_more(fired, timer):
        if fired.timestamp == 10:
            service.register_event_time_timer(V, 5)  # in the past
            service.register_event_time_timer(V, 20)  # == the watermark
            service.register_event_time_timer(V, 21)  # after the watermark: waits

    rec.on_fire = register_more
    at(backend, "k")
    service.register_event_time_timer(V, 10)
    assert service.advance_watermark(20) == 3
    assert rec.take() == [(10, "k"), (5, "k"), (20, "k")]
    assert service.num_event_time_timers() == 1
    assert service.earliest_timer(TimeDomain.EVENT_TIME).timestamp == 21


def test_a_callback_advancing_the_watermark_again_keeps_every_timer_firing_once_in_timestamp_order(setup):
    backend, service, rec = make(setup)
    nested = []

    def advance_inside(fired, timer):
        if fired.timestamp == 1:
            nested.append(service.advance_watermark(50))  # re-entrant: the watermark moves on inside a callback

    rec.on_fire = advance_inside
    for i, ts in enumerate([1, 5, 7, 30, 60]):
        at(backend, f"k{i}")
        service.register_event_time_timer(V, ts)
    service.advance_watermark(10)
    assert [timestamp for timestamp, _ in rec.take()] == [1, 5, 7, 30]
    assert nested == [3] and service.num_event_time_timers() == 1 and service.current_watermark() == 50


def test_callback_registrations_fire_in_the_same_advance_in_timestamp_order(setup):
    backend, service, rec = make(setup)

    def chain(fired, timer):
        if fired.timestamp < 50:
            service.register_event_time_timer(V, fired.timestamp + 10)  # a chain up to the watermark
        if fired.timestamp == 0 and fired.key == "k":
            at(backend, "other")
            service.register_event_time_timer(V, 0)  # for another key, at the timestamp firing right now
            service.register_event_time_timer(V, 35)

    rec.on_fire = chain
    at(backend, "k")
    service.register_event_time_timer(V, 0)
    fired_count = service.advance_watermark(52)
    fired = rec.take()
    assert fired_count == len(fired)
    assert sorted(fired) == sorted(
        [(t, "k") for t in (0, 10, 20, 30, 40, 50)] + [(0, "other"), (10, "other"), (20, "other"), (30, "other"),
                                                       (35, "other"), (40, "other"), (45, "other"), (50, "other")]
    )
    timestamps = [ts for ts, _ in fired]
    assert timestamps == sorted(timestamps)
    assert service.earliest_timer(TimeDomain.EVENT_TIME).timestamp == 55  # other: 35 -> 45 -> 55 > 52


def test_a_late_registration_is_accepted_and_fires_at_the_next_advance(setup):
    backend, service, rec = make(setup)
    service.advance_watermark(100)
    at(backend, "late")
    service.register_event_time_timer(V, 50)  # not rejected
    service.register_event_time_timer(V, 100)
    assert rec.take() == []  # registration never fires
    assert service.num_event_time_timers() == 2
    assert service.advance_watermark(100) == 2  # the next advance, even to the same watermark
    assert sorted(rec.take()) == [(50, "late"), (100, "late")]


# ---- 5. processing time -------------------------------------------------------------------------------------------


def test_processing_time_timers_fire_when_processing_time_reaches_them(setup):
    backend, service, rec = make(setup)
    at(backend, "k")
    service.register_processing_time_timer(V, 1_000)
    service.register_processing_time_timer(V, 2_000)
    service.register_event_time_timer(V, 500)
    assert service.advance_processing_time(999) == 0
    assert service.advance_processing_time(1_000) == 1
    assert rec.fired[0].domain is TimeDomain.PROCESSING_TIME and rec.fired[0].processing_time == 1_000
    assert rec.take() == [(1_000, "k")]
    assert service.current_processing_time() == 1_000
    assert service.num_event_time_timers() == 1  # processing time never fires event-time timers


def test_a_processing_time_timer_in_the_past_fires_at_the_next_advance(setup):
    backend, service, rec = make(setup)
    service.advance_processing_time(5_000)

    def again(fired, timer):
        if fired.timestamp == 1_000:
            service.register_processing_time_timer(V, 4_000)  # due: same advance
            service.register_processing_time_timer(V, 9_000)  # not due

    rec.on_fire = again
    at(backend, "k")
    service.register_processing_time_timer(V, 1_000)  # already in the past
    assert rec.take() == []
    assert service.advance_processing_time(5_000) == 2
    assert rec.take() == [(1_000, "k"), (4_000, "k")]
    assert service.num_processing_time_timers() == 1


# ---- 6. key context, state scope and watermark inside callbacks -------------------------------------------------


def test_callbacks_run_with_the_timers_key_state_and_the_new_watermark(setup):
    backend = setup.backend()
    state = backend.get_or_create_state(ValueStateDescriptor("v", str))
    seen = []

    def read(fired, timer):
        seen.append((fired.key, state.value(), fired.watermark, timer.timestamp, fired.namespace))

    backend, service, rec = make(setup, backend, read)
    keys = [f"user-{i}" for i in range(20)]
    for i, key in enumerate(keys):
        at(backend, key)
        state.update(f"value-of-{key}")
        service.register_event_time_timer(V, 100 + i)
    at(backend, "someone-else")
    service.advance_watermark(1_000)
    assert seen == [(key, f"value-of-{key}", 1_000, 100 + i, V) for i, key in enumerate(keys)]
    assert backend.get_current_key() == keys[-1]  # the context is the last timer's key
