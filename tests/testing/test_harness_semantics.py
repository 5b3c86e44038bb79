"""semantics.md through the test harness, on both backends: timers (items 1-8) and keyed state (9, 12)."""

from __future__ import annotations

import pytest

from keyedstate import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    KeyedProcessFunction,
    StateTtlConfig,
    Time,
    TimeDomain,
    Types,
    ValueStateDescriptor,
)
from keyedstate.testing import KeyedProcessHarness


class Scripted(KeyedProcessFunction):
    """Each element is (key, command, argument); on_timer reports what it sees and may register more timers."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.LONG()))

    def process_element(self, value, ctx):
        _, command, argument = value
        service = ctx.timer_service()
        self.seen.update((self.seen.value() or 0) + 1)
        if command == "event":
            service.register_event_time_timer(argument)
        elif command == "processing":
            service.register_processing_time_timer(argument)
        elif command == "delete-event":
            service.delete_event_time_timer(argument)
        elif command == "delete-processing":
            service.delete_processing_time_timer(argument)
        elif command == "chain":  # on_timer registers a timer at argument
            service.register_event_time_timer(argument)
        yield ("element", ctx.get_current_key(), argument)

    def on_timer(self, timestamp, ctx):
        service = ctx.timer_service()
        yield ("timer", ctx.get_current_key(), timestamp, ctx.time_domain(), service.current_watermark(),
               self.seen.value())
        if ctx.time_domain() is TimeDomain.EVENT_TIME and timestamp % 1000 == 1:
            service.register_event_time_timer(timestamp - 1)  # at or before the watermark: fires in this advance


@pytest.fixture
def harness(backend_kind):
    created = KeyedProcessHarness(Scripted(), key_selector=lambda v: v[0], backend=backend_kind).open()
    yield created
    created.close()


def timers_fired(output):
    return [(record[1], record[2]) for record in output if record[0] == "timer"]


# ---- item 1: identity ----------------------------------------------------------------------------------------------

def test_registering_the_same_timer_twice_fires_once(harness):
    harness.process_element(("a", "event", 100))
    harness.process_element(("a", "event", 100))
    assert harness.num_event_time_timers() == 1
    harness.process_watermark(100)
    assert timers_fired(harness.extract_output()) == [("a", 100)]


def test_the_same_timestamp_for_two_keys_fires_twice(harness):
    harness.process_element(("a", "event", 100))
    harness.process_element(("b", "event", 100))
    harness.process_watermark(100)
    assert sorted(timers_fired(harness.extract_output())) == [("a", 100), ("b", 100)]


def test_deleting_a_timer_that_is_not_registered_is_a_silent_no_op(harness):
    harness.process_element(("a", "delete-event", 5))
    harness.process_element(("a", "delete-processing", 5))
    harness.process_element(("a", "event", 100))
    harness.process_element(("a", "delete-event", 100))
    harness.process_watermark(1_000)
    assert timers_fired(harness.extract_output()) == []


# ---- item 2: when and in which order event-time timers fire --------------------------------------------------------

def test_event_time_timers_fire_when_the_watermark_reaches_them_in_ascending_order(harness):
    for key, timestamp in (("a", 300), ("b", 100), ("c", 200), ("a", 150)):
        harness.process_element((key, "event", timestamp))
    harness.extract_output()
    harness.process_watermark(99)
    assert timers_fired(harness.extract_output()) == []
    harness.process_watermark(200)  # inclusive: timestamp <= watermark
    assert timers_fired(harness.extract_output()) == [("b", 100), ("a", 150), ("c", 200)]
    assert harness.num_event_time_timers() == 1


# ---- item 3: due timers fire before later input --------------------------------------------------------------------

def test_advancing_the_watermark_fires_due_timers_before_later_input(harness):
    harness.process_element(("a", "event", 100))
    harness.process_watermark(100)
    harness.process_element(("a", "noop", 0))
    kinds = [record[0] for record in harness.extract_output()]
    assert kinds == ["element", "timer", "element"]


# ---- item 4: late registrations ---------------------------------------------------------------------------------

def test_a_timer_registered_in_on_timer_at_or_before_the_watermark_fires_in_the_same_advance(harness):
    harness.process_element(("a", "event", 5_001))  # its on_timer registers 5_000
    harness.process_watermark(6_000)
    assert timers_fired(harness.extract_output()) == [("a", 5_001), ("a", 5_000)]


def test_a_timer_registered_in_process_element_behind_the_watermark_fires_at_the_next_advance(harness):
    harness.process_watermark(1_000)
    harness.process_element(("a", "event", 500))  # never rejected
    assert timers_fired(harness.extract_output()) == []
    assert harness.num_event_time_timers() == 1
    harness.process_watermark(1_000)
    assert timers_fired(harness.extract_output()) == [("a", 500)]


# ---- item 5: processing time ----------------------------------------------------------------------------------------

def test_processing_time_timers_fire_when_processing_time_reaches_them(harness):
    harness.set_processing_time(1_000)
    harness.process_element(("a", "processing", 1_500))
    harness.set_processing_time(1_499)
    assert timers_fired(harness.extract_output()) == []
    harness.set_processing_time(1_500)
    assert timers_fired(harness.extract_output()) == [("a", 1_500)]


def test_a_processing_time_timer_registered_in_the_past_fires_as_soon_as_possible(harness):
    harness.set_processing_time(10_000)
    harness.process_element(("a", "processing", 5_000))
    harness.set_processing_time(10_000)
    assert timers_fired(harness.extract_output()) == [("a", 5_000)]


# ---- item 6: the context inside on_timer ---------------------------------------------------------------------------

def test_on_timer_sees_the_timers_key_state_new_watermark_and_emits_at_the_timer_time(harness):
    harness.process_element(("a", "noop", 0))
    harness.process_element(("a", "event", 100))
    harness.process_element(("b", "noop", 0))
    harness.extract_output()
    harness.process_watermark(250)
    (record, timestamp), = harness.extract_output(with_timestamps=True)
    assert record == ("timer", "a", 100, TimeDomain.EVENT_TIME, 250, 2)  # a's own count, not b's
    assert timestamp == 100


def test_processing_time_firings_have_no_event_timestamp(harness):
    harness.process_element(("a", "processing", 10))
    harness.extract_output()
    harness.set_processing_time(10)
    (record, timestamp), = harness.extract_output(with_timestamps=True)
    assert record[3] is TimeDomain.PROCESSING_TIME and timestamp is None


# ---- item 7: timers in checkpoints ---------------------------------------------------------------------------------

def test_timers_survive_snapshot_and_restore_and_overdue_processing_timers_fire_right_away(backend_kind):
    original = KeyedProcessHarness(Scripted(), key_selector=lambda v: v[0], backend=backend_kind).open()
    original.set_processing_time(1_000)
    original.process_element(("a", "event", 100))
    original.process_element(("b", "processing", 2_000))
    snapshot = original.snapshot()
    original.close()

    restored = KeyedProcessHarness.restore(Scripted(), lambda v: v[0], snapshot, backend=backend_kind)
    assert restored.current_watermark() == MIN_WATERMARK  # as in Flink, the watermark is not restored
    assert (restored.num_event_time_timers(), restored.num_processing_time_timers()) == (1, 1)
    restored.set_processing_time(5_000)  # the restarted job comes up late: the timer is overdue
    assert timers_fired(restored.extract_output()) == [("b", 2_000)]
    restored.process_watermark(100)
    assert timers_fired(restored.extract_output()) == [("a", 100)]
    restored.close()


def test_overdue_processing_timers_fire_on_restore_when_processing_time_moved_past_them(backend_kind, tmp_path):
    original = KeyedProcessHarness(Scripted(), key_selector=lambda v: v[0], backend=backend_kind).open()
    original.set_processing_time(1_000)
    original.process_element(("b", "processing", 500))  # registered in the past, not yet fired
    snapshot = original.snapshot()
    original.close()
    restored = KeyedProcessHarness.restore(Scripted(), lambda v: v[0], snapshot, backend=backend_kind)
    assert timers_fired(restored.extract_output()) == [("b", 500)]
    restored.close()


# ---- item 8: end of input -------------------------------------------------------------------------------------------

def test_end_of_input_fires_every_event_time_timer_but_no_processing_time_timer(harness):
    harness.process_element(("a", "event", 10**15))
    harness.process_element(("b", "event", MAX_WATERMARK))
    harness.process_element(("c", "processing", 10**15))
    harness.extract_output()
    harness.end_input()
    assert sorted(timers_fired(harness.extract_output())) == [("a", 10**15), ("b", MAX_WATERMARK)]
    assert harness.num_processing_time_timers() == 1


# ---- items 9 and 12: keyed state and TTL through the harness ----------------------------------------------------

class TtlCounter(KeyedProcessFunction):
    def open(self, runtime_context):
        descriptor = ValueStateDescriptor("count", Types.LONG())
        descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(10)).build())
        self.count = runtime_context.get_state(descriptor)

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield ctx.get_current_key(), count


def test_state_is_per_key_and_ttl_runs_on_processing_time(backend_kind):
    harness = KeyedProcessHarness(TtlCounter(), key_selector=lambda v: v, backend=backend_kind).open()
    harness.set_processing_time(0)
    for key in ("a", "a", "b"):
        harness.process_element(key)
    harness.set_processing_time(9_999)
    harness.process_element("a")
    harness.set_processing_time(20_000)  # b last written at 0, a at 9_999: both expired
    harness.process_element("a")
    harness.process_element("b")
    assert harness.extract_output() == [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("a", 1), ("b", 1)]
    harness.close()
