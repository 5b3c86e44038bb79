"""Heap timer storage: timers reach the raw column only in the pre-snapshot hook, and only changed key groups."""

from __future__ import annotations

from keyedstate.state.base.layout import VOID_NAMESPACE as V
from keyedstate.state.heap import HeapKeyedStateBackend
from timers import InternalTimerService, TimeDomain, decode_record

EVENT = "_timer_state/event_user-timers"


def stored(backend, column=EVENT):
    return sorted(decode_record(k, v) for k, v in backend.raw_column(column).items())


def test_heap_timers_are_flushed_into_the_raw_column_by_the_snapshot_hook():
    backend = HeapKeyedStateBackend()
    service = InternalTimerService(backend)
    for key in range(40):
        backend.set_current_key(key)
        service.register_event_time_timer(V, key * 3)
    assert stored(backend) == []  # nothing written through
    backend.prepare_snapshot()  # runs the pre-snapshot hook
    assert stored(backend) == sorted(service.timers(TimeDomain.EVENT_TIME))

    backend.set_current_key(7)
    service.delete_event_time_timer(V, 21)
    service.register_event_time_timer(V, 1_000)
    dirty = [kg for kg, queue in service._event.queue.queues.items() if queue.dirty]
    assert dirty == [backend.current_key_group]  # only the changed key group is rewritten
    assert service._event.flush() == 1
    assert stored(backend) == sorted(service.timers(TimeDomain.EVENT_TIME))
    assert not any(queue.dirty for queue in service._event.queue.queues.values())


def test_a_new_service_loads_timers_already_in_the_raw_column():
    backend = HeapKeyedStateBackend()
    first = InternalTimerService(backend)
    backend.set_current_key("a")
    first.register_processing_time_timer(V, 5)
    first.write_to_columns()
    second = InternalTimerService(backend, name="user-timers")
    assert [t.key for t in second.timers(TimeDomain.PROCESSING_TIME)] == ["a"]
    other = InternalTimerService(backend, name="other-operator")  # services with other names are separate
    assert other.num_processing_time_timers() == 0
