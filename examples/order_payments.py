"""Match orders with their payments: two streams keyed by order id share state and timers (a
``KeyedCoProcessFunction``, like Flink training's "rides and fares").

An order (first input) or a payment (second input) waits in keyed state for its counterpart. When both are there,
``(order_id, "paid", amount, paid)`` is emitted at once. One still alone ``timeout_ms`` of event time after it
arrived is given up on when the watermark (the minimum of both inputs' watermarks) passes that deadline:
``(order_id, "unpaid", amount, None)`` or ``(order_id, "unexpected_payment", None, paid)``.

Late elements (older than the watermark) still reach the function, as in Flink: a late one whose counterpart is
waiting is matched as usual; one with nothing to match goes to the ``late`` side output as
``(order_id, input, timestamp)`` instead of waiting in state.
"""

from __future__ import annotations

from keyedstate import KeyedCoProcessFunction, OutputTag, RuntimeContext, Types, ValueStateDescriptor

TIMEOUT_MS = 60_000
LATE = OutputTag("late")

OUTPUT_SCHEMA = "order_id STRING, outcome STRING, amount DOUBLE, paid DOUBLE"
LATE_SCHEMA = "order_id STRING, input STRING, ts BIGINT"


class OrderPaymentMatcher(KeyedCoProcessFunction):
    """First input: orders with ``amount``. Second input: payments with ``paid``. Both with event timestamps."""

    def __init__(self, timeout_ms: int = TIMEOUT_MS):
        self.timeout_ms = timeout_ms
        self.order = None
        self.payment = None
        self.deadline = None

    def open(self, runtime_context: RuntimeContext):
        self.order = runtime_context.get_state(ValueStateDescriptor("order-amount", Types.DOUBLE()))
        self.payment = runtime_context.get_state(ValueStateDescriptor("payment-amount", Types.DOUBLE()))
        self.deadline = runtime_context.get_state(ValueStateDescriptor("deadline", Types.LONG()))

    def process_element1(self, order, ctx: KeyedCoProcessFunction.Context):
        paid = self.payment.value()
        if paid is not None:
            yield self.matched(ctx, order["amount"], paid)
        else:
            yield from self.wait(ctx, self.order, order["amount"], "order")

    def process_element2(self, payment, ctx: KeyedCoProcessFunction.Context):
        amount = self.order.value()
        if amount is not None:
            yield self.matched(ctx, amount, payment["paid"])
        else:
            yield from self.wait(ctx, self.payment, payment["paid"], "payment")

    def on_timer(self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext):
        key = ctx.get_current_key()
        amount, paid = self.order.value(), self.payment.value()
        if amount is not None:
            yield key, "unpaid", amount, None
        if paid is not None:
            yield key, "unexpected_payment", None, paid
        self.order.clear()
        self.payment.clear()
        self.deadline.clear()

    def matched(self, ctx, amount: float, paid: float) -> tuple:
        ctx.timer_service().delete_event_time_timer(self.deadline.value())
        self.order.clear()
        self.payment.clear()
        self.deadline.clear()
        return ctx.get_current_key(), "paid", amount, paid

    def wait(self, ctx, state, value: float, what: str):
        timers = ctx.timer_service()
        if ctx.timestamp() < timers.current_watermark():
            yield LATE, (ctx.get_current_key(), what, ctx.timestamp())
            return
        state.update(value)  # a repeated order (or payment) replaces the waiting one and restarts its deadline
        previous = self.deadline.value()
        if previous is not None:
            timers.delete_event_time_timer(previous)
        deadline = ctx.timestamp() + self.timeout_ms
        timers.register_event_time_timer(deadline)
        self.deadline.update(deadline)
