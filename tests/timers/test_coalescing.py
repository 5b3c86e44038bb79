"""TimerService while collecting (a key run): the calls, kept per timestamp, have the effect of the direct calls."""

from __future__ import annotations

import random

import pytest
from timer_helpers import Setup, at, make

from keyedstate.errors import InvalidTimestampError, NoKeyContextError
from keyedstate.state.base.layout import VOID_NAMESPACE
from timers import TimeDomain, TimerService

pytestmark = pytest.mark.usefixtures("implementation")  # compiled calls where built, and the Python ones


def _collecting(service) -> TimerService:
    """The service as the operator uses it during a run of elements."""
    calls = TimerService(service)
    calls.collecting = True
    return calls


def _timers(service, domain):
    return sorted((timer.timestamp, timer.key_group) for timer in service.timers(domain))


def test_the_last_call_per_timestamp_decides_and_nothing_reaches_the_queue_before_flush(setup):
    backend, service, rec = make(setup)
    calls = _collecting(service)
    at(backend, "k")
    calls.register_event_time_timer(10)
    calls.delete_event_time_timer(10)  # registered and deleted in the run: gone
    calls.delete_event_time_timer(20)
    calls.register_event_time_timer(20)  # deleted, then registered: kept
    calls.register_processing_time_timer(30)
    calls.register_processing_time_timer(30)  # twice: once
    assert service.num_event_time_timers() == 0 and service.num_processing_time_timers() == 0
    calls.apply_collected_calls()
    assert [t for t, _ in _timers(service, TimeDomain.EVENT_TIME)] == [20]
    assert [t for t, _ in _timers(service, TimeDomain.PROCESSING_TIME)] == [30]
    service.advance_watermark(100)
    service.advance_processing_time(100)
    assert [(f.domain, f.timestamp, f.key) for f in rec.fired] == [
        (TimeDomain.EVENT_TIME, 20, "k"), (TimeDomain.PROCESSING_TIME, 30, "k")]


def test_a_run_can_delete_and_re_register_timers_queued_before_it(setup):
    backend, service, rec = make(setup)
    at(backend, "k")
    service.register_event_time_timer(VOID_NAMESPACE, 10)  # queued by an earlier run
    service.register_event_time_timer(VOID_NAMESPACE, 11)
    calls = _collecting(service)
    calls.register_event_time_timer(10)  # already queued: re-registering changes nothing ...
    calls.delete_event_time_timer(10)  # ... and the last call deletes it
    calls.delete_event_time_timer(11)
    calls.register_event_time_timer(11)  # deleted and registered again: still there
    calls.apply_collected_calls()
    assert [t for t, _ in _timers(service, TimeDomain.EVENT_TIME)] == [11]


def test_flush_applies_the_calls_to_the_current_key_only_and_starts_empty_again(setup):
    backend, service, rec = make(setup)
    calls = _collecting(service)
    at(backend, "a")
    calls.register_event_time_timer(5)
    calls.apply_collected_calls()
    at(backend, "b")
    calls.apply_collected_calls()  # nothing collected for b
    calls.register_event_time_timer(6)
    calls.apply_collected_calls()
    service.advance_watermark(10)
    assert rec.take() == [(5, "a"), (6, "b")]


@pytest.mark.parametrize("method", ["register_event_time_timer", "delete_event_time_timer",
                                    "register_processing_time_timer", "delete_processing_time_timer"])
@pytest.mark.parametrize("bad", [-1, 2**63, "soon", 1.5])
def test_an_invalid_timestamp_fails_at_the_call_and_is_not_collected(setup, method, bad):
    backend, service, _ = make(setup)
    calls = _collecting(service)
    at(backend, "k")
    with pytest.raises(InvalidTimestampError):
        getattr(calls, method)(bad)
    calls.apply_collected_calls()
    assert service.num_event_time_timers() == 0 and service.num_processing_time_timers() == 0


_METHODS = ["register_event_time_timer", "delete_event_time_timer", "register_processing_time_timer",
            "delete_processing_time_timer"]


def _random_runs(rng, keys, direct, backend_a, coalescing, backend_b, after_run=lambda run: None):
    """60 runs of random timer calls of one key each, made directly on ``direct`` and collected on ``coalescing``,
    which applies them at the end of each run."""
    for run in range(60):
        key = rng.choice(keys)
        at(backend_a, key)
        at(backend_b, key)
        for _ in range(rng.randrange(1, 12)):
            method, timestamp = rng.choice(_METHODS), rng.randrange(1, 15)
            getattr(direct, method)(timestamp)
            getattr(coalescing, method)(timestamp)
        coalescing.apply_collected_calls()
        after_run(run)


def test_random_call_sequences_leave_the_same_timers_as_the_direct_service(setup):
    """The oracle is a TimerService that is not collecting: it applies every call to the queues at once."""
    backend_a, direct_service, _ = make(setup)
    backend_b, coalesced_service, _ = make(setup)

    def same_timers(run):
        for domain in (TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME):
            expected = sorted((t.timestamp, t.key) for t in direct_service.timers(domain))
            assert sorted((t.timestamp, t.key) for t in coalesced_service.timers(domain)) == expected, run

    _random_runs(random.Random(7), [f"k{i}" for i in range(8)], TimerService(direct_service), backend_a,
                 _collecting(coalesced_service), backend_b, same_timers)


def test_outside_a_run_the_calls_go_straight_to_the_queues(setup):
    backend, service, rec = make(setup)
    calls = TimerService(service)  # not collecting: what on_timer's calls meet
    at(backend, "k")
    calls.register_event_time_timer(10)
    calls.register_processing_time_timer(11)
    assert _timers(service, TimeDomain.EVENT_TIME) and _timers(service, TimeDomain.PROCESSING_TIME)
    calls.delete_processing_time_timer(11)
    assert not _timers(service, TimeDomain.PROCESSING_TIME)
    at(backend, "other")
    calls.apply_collected_calls()  # nothing was collected, so nothing moves to "other"
    service.advance_watermark(10)
    assert rec.take() == [(10, "k")]


def test_flush_without_a_current_key_fails_and_drops_the_collected_calls(setup):
    backend, service, _ = make(setup)
    calls = _collecting(service)
    at(backend, "k")
    calls.register_event_time_timer(5)
    backend.clear_current_key()
    with pytest.raises(NoKeyContextError):
        calls.apply_collected_calls()
    at(backend, "k")
    calls.apply_collected_calls()  # nothing left to apply
    assert service.num_event_time_timers() == 0


def test_calls_flushed_while_timers_fire_join_the_firing_in_timestamp_order(setup):
    """A flush inside a timer callback meets a queue that is firing: the timer registered there, due at the
    watermark being advanced to, fires in the same advance and in timestamp order."""
    holder = {}

    def register_more(fired, timer):
        if fired.timestamp == 5:
            calls = holder["calls"]
            calls.register_event_time_timer(7)
            calls.delete_event_time_timer(9)
            calls.register_processing_time_timer(40)  # the other queue is idle: both go through one flush
            calls.apply_collected_calls()

    backend, service, rec = make(setup, on_fire=register_more)
    holder["calls"] = _collecting(service)
    at(backend, "a")
    service.register_event_time_timer(VOID_NAMESPACE, 5)
    service.register_event_time_timer(VOID_NAMESPACE, 8)
    service.register_event_time_timer(VOID_NAMESPACE, 9)
    service.advance_watermark(10)
    assert rec.take() == [(5, "a"), (7, "a"), (8, "a")]
    assert [t for t, _ in _timers(service, TimeDomain.PROCESSING_TIME)] == [40]


def test_a_registration_creates_the_queue_of_a_key_group_without_timers_and_deletions_of_it_are_settled(setup):
    backend, service, rec = make(setup)
    calls = _collecting(service)
    at(backend, "fresh")
    calls.delete_event_time_timer(3)  # no timers in this key group yet
    calls.register_processing_time_timer(4)
    calls.register_event_time_timer(6)
    calls.delete_processing_time_timer(1)
    calls.apply_collected_calls()
    assert [t for t, _ in _timers(service, TimeDomain.EVENT_TIME)] == [6]
    assert [t for t, _ in _timers(service, TimeDomain.PROCESSING_TIME)] == [4]
    service.advance_watermark(6)
    assert rec.take() == [(6, "fresh")]


def test_the_service_counts_a_runs_registrations_and_deletions_once_per_timestamp_and_direct_calls_each(setup):
    """What keyed_process reports as numRegisteredTimers and numDeletedTimers (docs/operations.md, Monitoring)."""
    backend, service, _ = make(setup)
    at(backend, "k")
    calls = _collecting(service)
    calls.register_event_time_timer(10)
    calls.register_event_time_timer(10)  # the same timestamp again in the run: one registration
    calls.register_event_time_timer(20)
    calls.delete_event_time_timer(20)  # the last call per timestamp counts: a deletion
    calls.delete_processing_time_timer(99)  # deleting a timer that does not exist counts too
    calls.register_processing_time_timer(30)
    calls.apply_collected_calls()
    assert calls.timer_counts() == (2, 2)
    calls.apply_collected_calls()  # nothing collected since: nothing counted
    calls.collecting = False  # as in on_timer: every call reaches the service, and counts
    calls.register_event_time_timer(40)
    calls.register_event_time_timer(40)
    calls.delete_event_time_timer(10)
    assert calls.timer_counts() == (4, 3)


@pytest.mark.parametrize("setup_name", ["rocksdb", "column-on-heap"])
def test_a_new_key_groups_unwritten_timers_take_a_runs_calls_as_the_heap_does_and_reach_the_column_at_the_flush(
        tmp_path, implementation, setup_name):
    """RocksDB mode's first call of a key group (``reload_key_group(new=True)``): its timers are held in memory as a
    set and a heap, so the compiled flush settles a run's calls by membership there, and nothing is written before
    the flush."""
    setup = Setup(setup_name, tmp_path)
    try:
        backend_a, direct_service, _ = make(setup)
        backend_b, deferred_service, _ = make(setup)
        keys = [f"k{i}" for i in range(8)]
        for key in keys:
            deferred_service.reload_key_group(at(backend_b, key).key_group, new=True)
        coalescing = _collecting(deferred_service)
        _random_runs(random.Random(11), keys, TimerService(direct_service), backend_a, coalescing, backend_b)
        queues = [*deferred_service.event_queue.queues.values(), *deferred_service.processing_queue.queues.values()]
        assert all(isinstance(queue.live, set) for queue in queues)  # still unwritten: no call wrote them
        if implementation == "compiled":  # settled in C, not by the Python flush
            assert deferred_service.timers_registered == 0 and coalescing.timer_counts()[0] > 0
        for domain in ("event", "processing"):
            column = backend_b.raw_column(f"_timer_state/{domain}_{deferred_service.name}")
            assert not list(column.items(b"", b"\xff" * 8)), f"{domain} timers were written before the flush"
        deferred_service.write_to_columns()
        assert all(queue.live is None for queue in queues)
        reread = setup.service(backend_b)  # a new service reads the key groups' timers from the columns
        for domain in (TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME):
            expected = sorted((t.timestamp, t.key) for t in direct_service.timers(domain))
            assert expected, "the random calls left no timer to compare"
            assert sorted((t.timestamp, t.key) for t in reread.timers(domain)) == expected
    finally:
        setup.close()
