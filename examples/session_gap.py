"""Sessions by inactivity gap: buffer a key's events in ListState until no event arrived for ``gap_ms`` of event
time, then emit one session record and clear the buffer.

An event that comes more than ``gap_ms`` after the last one closes the open session itself, even if the watermark
has not passed the gap yet: on Spark a whole micro-batch of elements is processed before the watermark moves, so
the gap timer alone would merge sessions that arrive in one batch.
"""

from __future__ import annotations

from keyedstate import KeyedProcessFunction, ListStateDescriptor, RuntimeContext, Types, ValueStateDescriptor

DEFAULT_GAP_MS = 30_000


class SessionGapFunction(KeyedProcessFunction):
    """Input: records with ``user`` and ``action``, with event timestamps, in event-time order per key.
    Output: ``(user, session_start, session_end, event_count, actions)`` where ``actions`` joins the actions."""

    def __init__(self, gap_ms: int = DEFAULT_GAP_MS):
        self.gap_ms = gap_ms
        self.events = None
        self.last_seen = None

    def open(self, runtime_context: RuntimeContext):
        self.events = runtime_context.get_list_state(
            ListStateDescriptor("events", Types.TUPLE([Types.LONG(), Types.STRING()]))
        )
        self.last_seen = runtime_context.get_state(ValueStateDescriptor("last-seen", Types.LONG()))

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        timestamp = ctx.timestamp()
        last_seen = self.last_seen.value()
        if last_seen is not None and timestamp > last_seen + self.gap_ms:
            ctx.timer_service().delete_event_time_timer(last_seen + self.gap_ms)
            yield from self.emit_session(ctx.get_current_key())
            last_seen = None
        self.events.add((timestamp, value["action"]))
        if last_seen is None or timestamp > last_seen:
            if last_seen is not None:
                ctx.timer_service().delete_event_time_timer(last_seen + self.gap_ms)
            self.last_seen.update(timestamp)
            ctx.timer_service().register_event_time_timer(timestamp + self.gap_ms)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        yield from self.emit_session(ctx.get_current_key())

    def emit_session(self, key):
        events = sorted(self.events.get())
        self.events.clear()
        self.last_seen.clear()
        if events:
            actions = ",".join(action for _, action in events)
            yield key, events[0][0], events[-1][0], len(events), actions
