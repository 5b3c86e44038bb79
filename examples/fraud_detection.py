"""Flink's fraud-detection tutorial, ported line for line from Java to PyFlink style.

An account that makes a small transaction (< 1.00) followed within one minute by a large one (> 500.00) raises an
alert. State: a flag ("the last transaction was small") and the time of the pending clean-up timer; a
processing-time timer clears the flag after one minute.
"""

from __future__ import annotations

from keyedstate import KeyedProcessFunction, RuntimeContext, Types, ValueStateDescriptor

SMALL_AMOUNT = 1.00
LARGE_AMOUNT = 500.00
ONE_MINUTE = 60 * 1000


class FraudDetector(KeyedProcessFunction):
    """Input: records with ``account_id`` and ``amount``. Output: ``(account_id,)`` alerts."""

    def __init__(self, window_ms: int = ONE_MINUTE):
        self.window_ms = window_ms
        self.flag_state = None
        self.timer_state = None

    def open(self, runtime_context: RuntimeContext):
        self.flag_state = runtime_context.get_state(ValueStateDescriptor("flag", Types.BOOLEAN()))
        self.timer_state = runtime_context.get_state(ValueStateDescriptor("timer-state", Types.LONG()))

    def process_element(self, transaction, ctx: KeyedProcessFunction.Context):
        last_transaction_was_small = self.flag_state.value()
        if last_transaction_was_small is not None:
            if transaction["amount"] > LARGE_AMOUNT:
                yield (transaction["account_id"],)
            self.clean_up(ctx)

        if transaction["amount"] < SMALL_AMOUNT:
            self.flag_state.update(True)
            timer = ctx.timer_service().current_processing_time() + self.window_ms
            ctx.timer_service().register_processing_time_timer(timer)
            self.timer_state.update(timer)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        self.timer_state.clear()
        self.flag_state.clear()

    def clean_up(self, ctx: KeyedProcessFunction.Context):
        timer = self.timer_state.value()
        ctx.timer_service().delete_processing_time_timer(timer)
        self.timer_state.clear()
        self.flag_state.clear()
