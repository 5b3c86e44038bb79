"""A richer fraud detector in event time, with several timers per account.

Rules, per account:

* small-then-large: a transaction under 1.00 followed within one minute by one over 500.00 (Flink's tutorial rule,
  in event time); a timer one minute after the small transaction ends the window.
* velocity: more than ``VELOCITY_LIMIT`` transactions within 30 seconds; every transaction registers a timer that
  drops it from the window when it leaves, so a busy account holds many timers at once.
* inactivity: ten minutes without a transaction clear the account's state (a timer per account, moved forward on
  every transaction).
"""

from __future__ import annotations

from keyedstate import (
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    RuntimeContext,
    Types,
    ValueStateDescriptor,
)

SMALL_AMOUNT = 1.00
LARGE_AMOUNT = 500.00
SMALL_THEN_LARGE_WINDOW_MS = 60_000
VELOCITY_WINDOW_MS = 30_000
VELOCITY_LIMIT = 5
INACTIVITY_MS = 600_000

ALERT_SCHEMA = "account_id STRING, rule STRING, amount DOUBLE, event_time_ms BIGINT"


class RichFraudDetector(KeyedProcessFunction):
    """Input rows with ``account_id``, ``amount``, ``merchant`` and an event time. Output: alert tuples."""

    def open(self, runtime_context: RuntimeContext):
        self.small_seen_at = runtime_context.get_state(ValueStateDescriptor("small-seen-at", Types.LONG()))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent-transactions", Types.LONG()))
        self.velocity_alerted = runtime_context.get_state(ValueStateDescriptor("velocity-alerted", Types.BOOLEAN()))
        self.merchants = runtime_context.get_map_state(MapStateDescriptor("merchants", Types.STRING(), Types.LONG()))
        self.last_seen = runtime_context.get_state(ValueStateDescriptor("last-seen", Types.LONG()))

    def process_element(self, transaction, ctx: KeyedProcessFunction.Context):
        now = ctx.timestamp()
        timers = ctx.timer_service()
        account = ctx.get_current_key()
        amount = transaction["amount"]

        small_seen_at = self.small_seen_at.value()
        if small_seen_at is not None and amount > LARGE_AMOUNT and now - small_seen_at <= SMALL_THEN_LARGE_WINDOW_MS:
            yield account, "small-then-large", amount, now
            timers.delete_event_time_timer(small_seen_at + SMALL_THEN_LARGE_WINDOW_MS)
            self.small_seen_at.clear()
        if amount < SMALL_AMOUNT:
            self.small_seen_at.update(now)
            timers.register_event_time_timer(now + SMALL_THEN_LARGE_WINDOW_MS)

        self.recent.add(now)
        timers.register_event_time_timer(now + VELOCITY_WINDOW_MS)
        window = [t for t in self.recent.get() if t > now - VELOCITY_WINDOW_MS]
        if len(window) > VELOCITY_LIMIT and not self.velocity_alerted.value():
            self.velocity_alerted.update(True)
            yield account, "velocity", amount, now

        merchant = transaction["merchant"]
        self.merchants.put(merchant, (self.merchants.get(merchant) or 0) + 1)

        last_seen = self.last_seen.value()
        if last_seen is not None:
            timers.delete_event_time_timer(last_seen + INACTIVITY_MS)
        self.last_seen.update(now)
        timers.register_event_time_timer(now + INACTIVITY_MS)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        last_seen = self.last_seen.value()
        if last_seen is not None and timestamp == last_seen + INACTIVITY_MS:
            self.small_seen_at.clear()
            self.recent.clear()
            self.velocity_alerted.clear()
            self.merchants.clear()
            self.last_seen.clear()
            return
        small_seen_at = self.small_seen_at.value()
        if small_seen_at is not None and timestamp == small_seen_at + SMALL_THEN_LARGE_WINDOW_MS:
            self.small_seen_at.clear()
        window = [t for t in self.recent.get() if t > timestamp - VELOCITY_WINDOW_MS]
        self.recent.update(window)
        if len(window) <= VELOCITY_LIMIT:
            self.velocity_alerted.clear()
        yield from ()
