"""KeyedCoProcessHarness: both inputs share a key's state and timers, the watermark is the minimum of the two
inputs', snapshots restore (also rescaled), and mistakes are reported clearly."""

from __future__ import annotations

import pytest

from keyedstate import (
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ListStateDescriptor,
    Types,
    ValueStateDescriptor,
)
from keyedstate.errors import ConfigurationError, UserFunctionError
from keyedstate.keygroups import key_group_of_key, partition_for_key_group
from keyedstate.testing import KeyedCoProcessHarness, KeyedProcessHarness

SEEN = ListStateDescriptor("seen", Types.STRING())


class Collect(KeyedCoProcessFunction):
    """Both inputs append to one list per key; a timer 10 s after each element emits the list (event time) or, for
    processing-time elements, 1 s of processing time later."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_list_state(SEEN)

    def process_element1(self, value, ctx):
        yield from self._add(f"1:{value['v']}", ctx)

    def process_element2(self, value, ctx):
        yield from self._add(f"2:{value['v']}", ctx)

    def _add(self, entry, ctx):
        self.seen.add(entry)
        if ctx.timestamp() is None:
            ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 1_000)
        else:
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10_000)
        return ()

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp, ctx.time_domain().name, ",".join(self.seen.get())


def harness(backend="heap", **options):
    return KeyedCoProcessHarness(Collect(), lambda a: a["k"], lambda b: b["key"], backend=backend, **options).open()


def test_both_inputs_share_the_state_and_timers_of_a_key(backend_kind):
    h = harness(backend_kind)
    h.process_element1({"k": "a", "v": "x"}, timestamp=1_000)
    h.process_element2({"key": "a", "v": "y"}, timestamp=1_000)  # same timer (key, 11 s): registered once
    h.process_element2({"key": "b", "v": "z"}, timestamp=2_000)
    assert h.num_event_time_timers() == 2
    assert h.state("a", SEEN).get() == ["1:x", "2:y"]
    h.process_watermark(20_000)
    assert sorted(h.extract_output()) == [("a", 11_000, "EVENT_TIME", "1:x,2:y"), ("b", 12_000, "EVENT_TIME", "2:z")]
    h.close()


def test_the_watermark_is_the_minimum_of_the_two_inputs():
    h = harness()
    h.process_element1({"k": "a", "v": "x"}, timestamp=1_000)  # timer at 11 s
    assert h.process_watermark1(50_000) == 0  # the second input is still at MIN_WATERMARK
    assert h.current_watermark() < 0
    assert h.process_watermark2(10_999) == 0
    assert h.current_watermark() == 10_999
    assert h.process_watermark2(30_000) == 1  # min(50 s, 30 s) passes 11 s
    assert h.current_watermark() == 30_000
    assert h.process_watermark1(20_000) == 0  # an input's watermark never goes back
    assert h.current_watermark() == 30_000
    assert h.extract_output() == [("a", 11_000, "EVENT_TIME", "1:x")]
    h.close()


def test_processing_time_timers_and_end_of_input():
    h = harness()
    h.set_processing_time(5_000)
    h.process_element2({"key": "p", "v": "q"})  # processing-time timer at 6 s
    h.process_element1({"k": "e", "v": "r"}, timestamp=7_000)  # event-time timer at 17 s
    assert h.set_processing_time(6_000) == 1
    assert h.extract_output() == [("p", 6_000, "PROCESSING_TIME", "2:q")]
    assert h.end_input() == 1
    assert h.extract_output() == [("e", 17_000, "EVENT_TIME", "1:r")]
    h.close()


def test_snapshot_and_restore_into_one_and_into_two_partitions(backend_kind):
    first = harness(backend_kind)
    users = [f"user-{i}" for i in range(12)]
    for index, user in enumerate(users):
        first.process_element1({"k": user, "v": "o"}, timestamp=index)
        first.process_element2({"key": user, "v": "p"}, timestamp=index)
    snapshot = first.snapshot()
    first.close()

    def finish(harnesses, route):
        for index, user in enumerate(users):
            harnesses[route(user)].process_element2({"key": user, "v": "late"}, timestamp=index)
        for h in harnesses:
            h.end_input()
        return sorted(record for h in harnesses for record in h.extract_output())

    selectors = (lambda a: a["k"], lambda b: b["key"])
    one = KeyedCoProcessHarness.restore(Collect(), *selectors, snapshot, backend=backend_kind)
    expected = finish([one], lambda user: 0)
    assert len(expected) == 12 and all(record[3] == "1:o,2:p,2:late" for record in expected)
    two = [KeyedCoProcessHarness.restore(Collect(), *selectors, snapshot, backend=backend_kind, partition=i,
                                         partitions=2) for i in range(2)]
    owner = lambda user: partition_for_key_group(key_group_of_key(user, 128), 2, 128)  # noqa: E731
    assert finish(two, owner) == expected
    for h in [one, *two]:
        h.close()


class FailsOnSecond(KeyedCoProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element1(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        return ()

    def process_element2(self, value, ctx):
        raise RuntimeError("payment without amount")


def test_an_error_names_the_input_callback_the_key_and_the_element():
    h = KeyedCoProcessHarness(FailsOnSecond(), lambda v: v[0], lambda v: v[0]).open()
    h.process_element1(("a", 1))
    with pytest.raises(UserFunctionError, match=r"FailsOnSecond\.process_element2 failed for key 'a' on element "
                                                r"\('a', 2\): RuntimeError: payment without amount"):
        h.process_element2(("a", 2))
    h.close()


class OneInput(KeyedProcessFunction):
    def process_element(self, value, ctx):
        return ()


def test_each_harness_refuses_the_other_kind_of_function():
    with pytest.raises(ConfigurationError, match=r"KeyedCoProcessHarness runs a KeyedCoProcessFunction, got "
                                                 r"OneInput.*KeyedProcessHarness"):
        KeyedCoProcessHarness(OneInput(), lambda v: v, lambda v: v)
    with pytest.raises(ConfigurationError, match=r"KeyedProcessHarness runs a KeyedProcessFunction, got "
                                                 r"FailsOnSecond.*KeyedCoProcessHarness"):
        KeyedProcessHarness(FailsOnSecond(), lambda v: v)


def test_a_key_selector_that_is_not_callable_is_named():
    with pytest.raises(ConfigurationError, match=r"key_selector2 must be a callable"):
        KeyedCoProcessHarness(FailsOnSecond(), lambda v: v, "key")


def test_a_function_without_process_element2_cannot_be_created():
    class OnlyFirst(KeyedCoProcessFunction):
        def process_element1(self, value, ctx):
            return ()

    with pytest.raises(TypeError, match="process_element2"):
        OnlyFirst()


def test_the_contexts_are_those_of_keyed_process_function():
    assert KeyedCoProcessFunction.Context is KeyedProcessFunction.Context
    assert KeyedCoProcessFunction.OnTimerContext is KeyedProcessFunction.OnTimerContext
