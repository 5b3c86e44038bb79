"""User mistakes get our own errors that name the function, the key and the element or timer."""

from __future__ import annotations

import pytest

from keyedstate import KeyedProcessFunction, OutputTag, Types, ValueStateDescriptor
from keyedstate.errors import (
    InvalidOutputError,
    NoKeyContextError,
    StateAccessOutsideOpenError,
    UserFunctionError,
)
from keyedstate.testing import KeyedProcessHarness


class Fails(KeyedProcessFunction):
    def process_element(self, value, ctx):
        if value["amount"] < 0:
            raise ValueError("negative amount")
        ctx.timer_service().register_event_time_timer(10)
        yield value

    def on_timer(self, timestamp, ctx):
        raise RuntimeError("timer exploded")


def test_an_exception_in_process_element_names_function_key_and_element(backend_kind):
    harness = KeyedProcessHarness(Fails(), key_selector=lambda v: v["account"], backend=backend_kind).open()
    with pytest.raises(UserFunctionError) as failure:
        harness.process_element({"account": "acct-7", "amount": -5})
    message = str(failure.value)
    assert "Fails.process_element failed for key 'acct-7'" in message
    assert "{'account': 'acct-7', 'amount': -5}" in message and "ValueError: negative amount" in message
    assert isinstance(failure.value.__cause__, ValueError)
    harness.close()


def test_an_exception_in_on_timer_names_the_timer(backend_kind):
    harness = KeyedProcessHarness(Fails(), key_selector=lambda v: v["account"], backend=backend_kind).open()
    harness.process_element({"account": "acct-1", "amount": 1})
    with pytest.raises(UserFunctionError, match=r"Fails.on_timer failed for key 'acct-1' on event-time timer at 10"):
        harness.process_watermark(10)
    harness.close()


class KeepsContext(KeyedProcessFunction):
    def process_element(self, value, ctx):
        self.kept = ctx.timer_service()
        return ()


def test_registering_a_timer_outside_a_keyed_context_is_a_clear_error():
    harness = KeyedProcessHarness(KeepsContext(), key_selector=lambda v: v).open()
    harness.process_element("a")
    with pytest.raises(NoKeyContextError, match="only be used inside process_element or on_timer"):
        harness.operator.function.kept.register_event_time_timer(5)
    harness.close()


class KeepsTheFirstContext(KeyedProcessFunction):
    """Keeps the first context it gets and uses only that one (unsupported, but what it does is documented)."""

    kept = None

    def process_element(self, value, ctx):
        self.kept = self.kept or ctx
        self.kept.timer_service().register_event_time_timer(self.kept.timestamp() + 1)
        yield self.kept.get_current_key(), self.kept.timestamp()

    def on_timer(self, timestamp, ctx):
        yield self.kept.get_current_key(), self.kept.timestamp(), self.kept.time_domain().name


def test_a_kept_context_acts_as_the_context_of_the_call_under_way_and_outside_calls_has_no_key():
    harness = KeyedProcessHarness(KeepsTheFirstContext(), key_selector=lambda v: v).open()
    harness.process_element("a", timestamp=10)
    harness.process_element("b", timestamp=20)
    harness.process_watermark(25)
    assert [tuple(record) for record in harness.extract_output()] == [
        ("a", 10), ("b", 20), ("a", 11, "EVENT_TIME"), ("b", 21, "EVENT_TIME")]
    kept = harness.operator.function.kept
    with pytest.raises(NoKeyContextError):
        kept.get_current_key()
    with pytest.raises(NoKeyContextError):
        kept.timer_service().delete_event_time_timer(11)
    assert kept.timestamp() == 21
    harness.close()


class StateInInit(KeyedProcessFunction):
    def __init__(self):
        self.count = ValueStateDescriptor("count", Types.LONG())  # the mistake: a descriptor is not state

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        return ()


def test_using_a_descriptor_as_state_points_to_open():
    harness = KeyedProcessHarness(StateInInit(), key_selector=lambda v: v).open()
    with pytest.raises(UserFunctionError) as failure:
        harness.process_element("a")
    assert isinstance(failure.value.__cause__, StateAccessOutsideOpenError)
    assert "runtime_context.get_state(descriptor)" in str(failure.value) and "open()" in str(failure.value)
    harness.close()


class YieldsNone(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield None


class ReturnsNumber(KeyedProcessFunction):
    def process_element(self, value, ctx):
        return 42


class SideOutputs(KeyedProcessFunction):
    LATE = OutputTag("late")

    def process_element(self, value, ctx):
        if value < 0:
            yield SideOutputs.LATE, value
            ctx.output(SideOutputs.LATE, value * 10)
        else:
            yield value


@pytest.mark.parametrize("function, fragment", [(YieldsNone(), "yielded None"), (ReturnsNumber(), "returned a int")])
def test_yielding_a_non_record_is_a_clear_error(function, fragment):
    harness = KeyedProcessHarness(function, key_selector=lambda v: v).open()
    with pytest.raises(UserFunctionError, match=fragment) as failure:
        harness.process_element(1)
    assert isinstance(failure.value.__cause__, InvalidOutputError)
    harness.close()


def test_side_outputs_are_kept_apart_from_the_main_output():
    harness = KeyedProcessHarness(SideOutputs(), key_selector=lambda v: abs(v)).open()
    harness.process_element(1, timestamp=5)
    harness.process_element(-2, timestamp=6)
    assert harness.extract_output() == [1]
    assert harness.side_output(SideOutputs.LATE, with_timestamps=True) == [(-2, 6), (-20, 6)]


def test_key_selector_and_timestamps_are_validated():
    from keyedstate.errors import ConfigurationError, InvalidTimestampError

    with pytest.raises(ConfigurationError, match="key_selector"):
        KeyedProcessHarness(SideOutputs(), key_selector="user")
    harness = KeyedProcessHarness(SideOutputs(), key_selector=lambda v: v).open()
    for bad in (-1, 1.5, float("nan"), True):
        with pytest.raises(InvalidTimestampError):
            harness.process_element(1, timestamp=bad)
    harness.close()
