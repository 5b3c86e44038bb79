"""The three versions of the function the lifecycle test upgrades through savepoints
(tests/connectors/test_job_lifecycle.py).

Every element yields ``(user, count, total)``: the key's running count and sum of amounts, so an element lost,
duplicated or counted against another key's state shows in the output. v1 keeps the count as INT and a ``profile``
ROW ``(total, last_amount)``; v2 widens the count to LONG, adds the field ``last_ts`` to the profile ROW and adds
the state ``last_amount_seen``; v3 is v2's code run on another Spark. Each key keeps one pending event-time timer far
in the future, so timers must survive both savepoints.
"""

from __future__ import annotations

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor

OUTPUT = "user STRING, count BIGINT, total BIGINT"
FAR_TIMER_MS = 4_102_444_800_000  # 2100-01-01: never fires in the test


def _millis(ts) -> int:
    return int(ts.timestamp() * 1000)


class ScoreV1(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))
        self.profile = runtime_context.get_state(ValueStateDescriptor(
            "profile", Types.ROW_NAMED(["total", "last_amount"], [Types.LONG(), Types.LONG()])))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        profile = self.profile.value()
        total = (profile[0] if profile else 0) + value["amount"]
        self.count.update(count)
        self.profile.update((total, value["amount"]))
        ctx.timer_service().register_event_time_timer(FAR_TIMER_MS)
        yield value["user"], count, total


class ScoreV2(KeyedProcessFunction):
    """v1 with the count widened to LONG, a field added to the profile and a state added."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.profile = runtime_context.get_state(ValueStateDescriptor(
            "profile", Types.ROW_NAMED(["total", "last_amount", "last_ts"],
                                       [Types.LONG(), Types.LONG(), Types.LONG()])))
        self.last_amount_seen = runtime_context.get_state(ValueStateDescriptor("last_amount_seen", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        profile = self.profile.value()
        total = (profile[0] if profile else 0) + value["amount"]
        self.count.update(count)
        self.profile.update((total, value["amount"], _millis(value["ts"])))
        self.last_amount_seen.update(value["amount"])
        ctx.timer_service().register_event_time_timer(FAR_TIMER_MS)
        yield value["user"], count, total
