"""semantics.md item 8 (end of input), the user-facing timer service and what callbacks and inspection hand out,
directly against InternalTimerService, for every timer storage."""

from __future__ import annotations

import pytest
from timer_helpers import at, make

from keyedstate.state.base.layout import VOID_NAMESPACE
from timers import MAX_WATERMARK, MIN_WATERMARK, TimeDomain, TimerService

V = VOID_NAMESPACE


# ---- 8. end of input -----------------------------------------------------------------------------------------------


def test_end_of_input_fires_every_event_time_timer_but_no_processing_time_timer(setup):
    backend, service, rec = make(setup)
    at(backend, "k")
    service.register_event_time_timer(V, 5)
    service.register_event_time_timer(V, MAX_WATERMARK)  # the largest timestamp fires too
    service.register_processing_time_timer(V, 0)
    assert service.end_of_input() == 2
    assert rec.take() == [(5, "k"), (MAX_WATERMARK, "k")]
    assert all(f.domain is TimeDomain.EVENT_TIME for f in rec.fired)
    assert service.current_watermark() == MAX_WATERMARK
    assert service.num_processing_time_timers() == 1


# ---- the user-facing timer service ---------------------------------------------------------------------------------


def test_timer_service_facade_uses_pyflink_names_and_the_void_namespace(setup):
    backend, service, rec = make(setup)
    facade = TimerService(service)
    at(backend, "k")
    facade.register_event_time_timer(10)
    facade.register_event_time_timer(11)
    facade.delete_event_time_timer(11)
    facade.register_processing_time_timer(20)
    facade.register_processing_time_timer(21)
    facade.delete_processing_time_timer(21)
    assert facade.current_watermark() == MIN_WATERMARK
    service.advance_watermark(100)
    service.advance_processing_time(200)
    assert facade.current_watermark() == 100 and facade.current_processing_time() == 200
    assert [(f.domain, f.timestamp, f.namespace) for f in rec.fired] == [
        (TimeDomain.EVENT_TIME, 10, V),
        (TimeDomain.PROCESSING_TIME, 20, V),
    ]


def test_timers_need_a_current_key(setup):
    from keyedstate.errors import NoKeyContextError

    backend, service, rec = make(setup)
    with pytest.raises(NoKeyContextError):
        TimerService(service).register_event_time_timer(1)
    with pytest.raises(NoKeyContextError):
        service.delete_processing_time_timer(V, 1)


def test_a_failing_callback_propagates_and_later_timers_fire_at_the_next_advance(setup):
    backend, service, rec = make(setup)

    def fail_once(fired, timer):
        if fired.timestamp == 2 and not getattr(fail_once, "done", False):
            fail_once.done = True
            raise RuntimeError("user code failed")

    rec.on_fire = fail_once
    at(backend, "k")
    for ts in (1, 2, 3):
        service.register_event_time_timer(V, ts)
    with pytest.raises(RuntimeError, match="user code failed"):
        service.advance_watermark(10)
    assert rec.take() == [(1, "k"), (2, "k")]
    assert service.advance_watermark(10) == 1
    assert rec.take() == [(3, "k")]


# ---- what callbacks and inspection hand out ------------------------------------------------------------------------


class _Collect:
    def __init__(self, accepts_timer_tuples):
        self.accepts_timer_tuples = accepts_timer_tuples
        self.timers = []

    def on_event_time(self, timer):
        self.timers.append(timer)

    on_processing_time = on_event_time


@pytest.mark.parametrize("accepts_timer_tuples", [False, True])
def test_callbacks_get_internal_timers_unless_the_triggerable_accepts_plain_tuples(setup, accepts_timer_tuples):
    from timers import InternalTimer

    backend = setup.backend()
    collect = _Collect(accepts_timer_tuples)
    service = setup.service(backend)
    service.set_triggerable(collect)
    at(backend, "alice")
    service.register_event_time_timer(V, 7)
    service.register_processing_time_timer(V, 9)
    service.advance_watermark(10)
    service.advance_processing_time(10)
    assert [tuple(t) for t in collect.timers] == [(7, backend.current_key_prefix, V, backend.current_key_group)] + [
        (9, backend.current_key_prefix, V, backend.current_key_group)
    ]
    if accepts_timer_tuples:
        assert all(type(t) is tuple for t in collect.timers)
    else:
        assert all(type(t) is InternalTimer for t in collect.timers)
        assert [(t.timestamp, t.key, t.namespace) for t in collect.timers] == [(7, "alice", V), (9, "alice", V)]


def test_inspection_hands_out_internal_timers(setup):
    from timers import InternalTimer

    backend, service, _ = make(setup)
    at(backend, "bob")
    service.register_event_time_timer(V, 5)
    earliest = service.earliest_timer(TimeDomain.EVENT_TIME)
    listed = list(service.timers(TimeDomain.EVENT_TIME))
    of_group = list(service.timers(TimeDomain.EVENT_TIME, backend.current_key_group))
    assert type(earliest) is InternalTimer and (earliest.timestamp, earliest.key) == (5, "bob")
    assert [type(t) for t in listed + of_group] == [InternalTimer, InternalTimer] and listed == of_group == [earliest]
