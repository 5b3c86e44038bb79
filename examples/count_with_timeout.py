"""Flink's count-with-timeout example (ProcessFunction docs): count per key, emit ``(key, count)`` once a key has
seen no element for 60 seconds of event time."""

from __future__ import annotations

from keyedstate import KeyedProcessFunction, RuntimeContext, Types, ValueStateDescriptor

TIMEOUT_MS = 60_000


class CountWithTimeoutFunction(KeyedProcessFunction):
    """Input: ``(key, payload)`` tuples with event timestamps. Output: ``(key, count)``."""

    def __init__(self):
        self.state = None

    def open(self, runtime_context: RuntimeContext):
        self.state = runtime_context.get_state(ValueStateDescriptor("my_state", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        current = self.state.value()
        if current is None:
            current = [value[0], 0, 0]
        current[1] += 1
        current[2] = ctx.timestamp()
        self.state.update(current)
        ctx.timer_service().register_event_time_timer(current[2] + TIMEOUT_MS)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        result = self.state.value()
        if timestamp == result[2] + TIMEOUT_MS:
            yield result[0], result[1]
