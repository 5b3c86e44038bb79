"""KeyedProcessOperator.process_key_runs (the Spark group function's hot path) gives a run of many elements what
one run per element gives (process_element, the harness's path): same outputs, same state, same timers, and the
same timers fire, whatever the function's timer calls."""

from __future__ import annotations

import random
from typing import Any

import pytest

from keyedstate import KeyedCoProcessFunction, KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.errors import ConfigurationError, UserFunctionError
from keyedstate.keygroups import key_group_of_key, key_group_prefix
from keyedstate.operator import KeyedProcessOperator
from keyedstate.serialization import encode_key
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.testing import KeyedProcessHarness
from timers import TimeDomain

NUM_KEY_GROUPS = 16

# The Spark group function's configuration: compiled value state and timer calls where built, checked against the
# pure-Python implementation too.
pytestmark = pytest.mark.usefixtures("implementation")


def _backend() -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend(num_key_groups=NUM_KEY_GROUPS, validate_writes=False)


class TimerHeavy(KeyedProcessFunction):
    """Every element deletes and registers timers of both domains, with collisions between elements of a key."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        timers = ctx.timer_service()
        action, timestamp = value
        if action == "fail":
            raise RuntimeError("bad element")
        getattr(timers, action)(timestamp)
        self.count.update((self.count.value() or 0) + 1)
        yield ctx.get_current_key(), action, timestamp

    def on_timer(self, timestamp, ctx):
        if timestamp % 7 == 0:  # a callback registering a timer that is already due fires it in the same advance
            ctx.timer_service().register_event_time_timer(timestamp + 1)
        yield ctx.get_current_key(), "fired", timestamp


ACTIONS = ["register_event_time_timer", "delete_event_time_timer", "register_processing_time_timer",
           "delete_processing_time_timer"]


def _operator() -> KeyedProcessOperator:
    operator = KeyedProcessOperator(TimerHeavy(), _backend())
    operator.open()
    return operator


def _runs(elements: list[tuple[str, Any]]) -> tuple[list, list, list]:
    """Elements grouped into one run per key, as the group function builds them."""
    keys = sorted({key for key, _ in elements})
    values: list = []
    runs: list = []
    for key in keys:
        start = len(values)
        values += [value for k, value in elements if k == key]
        prefix = key_group_prefix(key_group_of_key(key, NUM_KEY_GROUPS)) + encode_key(key)
        runs.append((key, prefix, start, len(values)))
    return runs, values, [None] * len(values)


def _timers(operator: KeyedProcessOperator) -> list:
    service = operator.internal_timer_service
    return [sorted((t.timestamp, t.key) for t in service.timers(domain))
            for domain in (TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME)]


def _one_by_one(elements: list[tuple[str, Any]]) -> KeyedProcessOperator:
    operator = _operator()
    runs, values, _ = _runs(elements)
    for key, _, start, end in runs:
        for value in values[start:end]:
            operator.process_element(key, value)
    return operator


def _random_elements(rng: random.Random) -> list[tuple[str, Any]]:
    return [(f"k{rng.randrange(6)}", (rng.choice(ACTIONS), rng.randrange(1, 30))) for _ in range(rng.randrange(1, 80))]


@pytest.mark.parametrize("seed", range(12))
def test_key_runs_leave_the_timers_state_and_outputs_of_element_by_element_processing(seed):
    rng = random.Random(seed)
    batches = [_random_elements(rng) for _ in range(3)]
    oracle, operator = _operator(), _operator()
    for elements in batches:
        runs, values, timestamps = _runs(elements)
        for key, _, start, end in runs:
            for value in values[start:end]:
                oracle.process_element(key, value)
        operator.process_key_runs(runs, values, timestamps)
        operator.backend.clear_current_key()
        assert _timers(operator) == _timers(oracle)
        assert operator.outputs.drain() == oracle.outputs.drain()
        watermark = rng.randrange(0, 40)
        for each in (oracle, operator):
            each.advance_watermark(watermark)
            each.advance_processing_time(watermark)
        assert operator.outputs.drain() == oracle.outputs.drain()
        assert _timers(operator) == _timers(oracle)
    assert operator.backend.export_records() == oracle.backend.export_records()


def test_a_failing_element_keeps_the_timers_registered_before_it_and_names_key_and_element():
    operator = _operator()
    elements = [("a", ("register_event_time_timer", 5)), ("b", ("register_event_time_timer", 6)),
                ("b", ("delete_event_time_timer", 6)), ("b", ("register_processing_time_timer", 9)),
                ("b", ("fail", 0)), ("c", ("register_event_time_timer", 7))]
    runs, values, timestamps = _runs(elements)
    with pytest.raises(UserFunctionError, match=r"for key 'b' on element \('fail', 0\)"):
        operator.process_key_runs(runs, values, timestamps)
    operator.backend.clear_current_key()
    assert _timers(operator) == [[(5, "a")], [(9, "b")]]
    assert operator.elements_processed == 4
    # The failed run stopped collecting: the due timer the callback at 7 registers (for 8) fires in the same advance.
    assert operator.user_timer_service.collecting is False
    runs, values, timestamps = _runs([("c", ("register_event_time_timer", 7))])
    operator.process_key_runs(runs, values, timestamps)
    operator.outputs.drain()
    operator.advance_watermark(10)
    records, _ = operator.outputs.drain()
    fired = [(key, timestamp) for key, what, timestamp in records if what == "fired"]
    assert fired == [("a", 5), ("c", 7), ("c", 8)]


class KeepsTheTimerService(KeyedProcessFunction):
    """Keeps the first ``ctx.timer_service()`` it sees and uses it everywhere, including in on_timer."""

    timers = None

    def process_element(self, value, ctx):
        if self.timers is None:
            self.timers = ctx.timer_service()
        self.timers.register_event_time_timer(value)

    def on_timer(self, timestamp, ctx):
        if timestamp < 100:
            self.timers.register_event_time_timer(timestamp + 100)  # due at the next watermark, for this key
        yield ctx.get_current_key(), timestamp


def test_a_timer_service_kept_from_process_element_works_for_the_firing_key_in_on_timer():
    operator = KeyedProcessOperator(KeepsTheTimerService(), _backend())
    operator.open()
    runs, values, timestamps = _runs([("a", 5), ("b", 7)])
    operator.process_key_runs(runs, values, timestamps)
    operator.advance_watermark(10)
    runs, values, timestamps = _runs([("c", 50)])
    operator.process_key_runs(runs, values, timestamps)  # a flush here must not move a's or b's new timers to c
    operator.advance_watermark(200)
    records, _ = operator.outputs.drain()
    assert records == [("a", 5), ("b", 7), ("c", 50), ("a", 105), ("b", 107), ("c", 150)]


class TwoInputs(KeyedCoProcessFunction):
    """Both inputs count into one state per key; each callback says which input it served."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element1(self, value, ctx):
        yield from self._count("first", value)

    def process_element2(self, value, ctx):
        if value == "fail":
            raise RuntimeError("bad payment")
        yield from self._count("second", value)

    def _count(self, callback, value):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield callback, value, count


def test_key_runs_of_two_inputs_dispatch_by_input_index_like_process_element():
    elements = [("a", "x"), ("b", "y"), ("a", "z"), ("a", "w"), ("b", "v")]
    inputs_by_value = {"x": 0, "y": 1, "z": 1, "w": 0, "v": 0}
    runs, values, timestamps = _runs(elements)
    oracle = KeyedProcessOperator(TwoInputs(), _backend())
    oracle.open()
    for key, _, start, end in runs:
        for value in values[start:end]:
            oracle.process_element(key, value, input_index=inputs_by_value[value])
    operator = KeyedProcessOperator(TwoInputs(), _backend())
    operator.open()
    operator.process_key_runs(runs, values, timestamps, [inputs_by_value[value] for value in values])
    records, _ = operator.outputs.drain()
    assert records == oracle.outputs.drain()[0]
    assert records == [("first", "x", 1), ("second", "z", 2), ("first", "w", 3), ("second", "y", 1),
                       ("first", "v", 2)]
    with pytest.raises(UserFunctionError, match=r"TwoInputs\.process_element2 failed for key 'b' on element 'fail'"):
        operator.process_key_runs(*_runs([("b", "fail")])[:3], [1])
    with pytest.raises(ConfigurationError, match=r"TwoInputs has 2 input\(s\) .* there is no input 2"):
        operator.process_element("a", "x", input_index=2)


class SeesItsTimerService(KeyedProcessFunction):
    """Records each call's timer service and whether it was collecting a key run's calls."""

    def __init__(self):
        self.seen = []
        self.services = set()

    def process_element(self, value, ctx):
        service = ctx.timer_service()
        self.services.add(id(service))
        self.seen.append(("element", service.collecting))
        service.register_event_time_timer(10)

    def on_timer(self, timestamp, ctx):
        self.services.add(id(ctx.timer_service()))
        self.seen.append(("timer", ctx.timer_service().collecting))
        if timestamp == 10:
            ctx.timer_service().register_event_time_timer(5)  # already due: fires in the same advance


def test_the_harness_runs_each_element_as_a_key_run_like_spark():
    function = SeesItsTimerService()
    with KeyedProcessHarness(function, lambda e: e) as harness:
        harness.process_element("a")
        assert harness.num_event_time_timers() == 1  # the run's collected call was flushed when the run ended
        assert harness.process_watermark(10) == 2
    assert function.seen == [("element", True), ("timer", False), ("timer", False)]
    assert len(function.services) == 1  # one TimerService, collecting only while the key's elements run
