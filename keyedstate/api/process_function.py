"""``KeyedProcessFunction``: the function users write, with PyFlink's names and call order.

Lifecycle of one function instance (one per partition):

1. ``open(runtime_context)`` once, before any element or timer; get state handles here.
2. For each input element, with its key set as the current key: ``process_element(value, ctx)``.
3. Whenever the watermark advances (event time) or the processing clock advances (processing time), for every timer
   that became due, in ascending timestamp order and with the timer's key set as the current key:
   ``on_timer(timestamp, ctx)``. On Spark both clocks advance at the start of every micro-batch, before the batch's
   elements are processed; in the test harness they advance when the test calls ``process_watermark`` or
   ``set_processing_time``.
4. ``close()`` once at the end.

``process_element`` and ``on_timer`` never run concurrently, and never concurrently with a snapshot. Both are
generators: ``yield record`` emits to the main output, ``yield output_tag, value`` (or ``ctx.output(tag, value)``)
to a side output. Returning an iterable instead of yielding works too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterable, Optional

from keyedstate.api.runtime_context import RuntimeContext
from keyedstate.api.time_domain import OutputTag, TimeDomain

__all__ = ["Function", "KeyedProcessFunction"]


class Function(ABC):
    """Base of user functions: ``open`` before any data, ``close`` after all of it."""

    def open(self, runtime_context: RuntimeContext) -> None:
        """Called once before the first element or timer. Register state here."""

    def close(self) -> None:
        """Called once after the last element or timer (also when the job fails, where possible)."""


class KeyedProcessFunction(Function):
    """Processes the elements of a keyed stream one by one, with keyed state and timers.

    Subclass it and implement :meth:`process_element` (required) and :meth:`on_timer` (when you register timers).
    """

    class Context(ABC):
        """What ``process_element`` can see: the key, the element's timestamp, timers and side outputs.

        The context and its ``timer_service()`` are valid only during the call they are passed to
        (``process_element`` or ``on_timer``), as in PyFlink: keep neither. What keyedstate does with a kept one:
        a function instance gets the same context and timer service objects in every call, pointed at the call
        under way, so used during a later call they act as that call's (its key, timestamp and timers). Used
        outside any call (after the call returned, from ``open``/``close`` or another thread) is unsupported: they
        act on whatever key the operator has current then, if any (none in the test harness: the timer calls and
        ``get_current_key()`` raise ``NoKeyContextError``), and ``timestamp()`` is the last call's."""

        @abstractmethod
        def get_current_key(self) -> Any:
            """The key of the element being processed."""

        @abstractmethod
        def timestamp(self) -> Optional[int]:
            """The element's event time in epoch ms (None when the stream has no event time)."""

        @abstractmethod
        def timer_service(self) -> Any:
            """The :class:`~timers.TimerService` for registering and deleting timers of the current key (valid only
            during this call, like the context)."""

        @abstractmethod
        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output named by ``output_tag``."""

    class OnTimerContext(Context):
        """``on_timer``'s context: ``timestamp()`` is the timer's time; ``time_domain()`` says which clock fired."""

        @abstractmethod
        def time_domain(self) -> TimeDomain:
            """``TimeDomain.EVENT_TIME`` or ``TimeDomain.PROCESSING_TIME``."""

    @abstractmethod
    def process_element(self, value: Any, ctx: "KeyedProcessFunction.Context") -> Optional[Iterable[Any]]:
        """Called for every element, with the element's key as the current key. Yield output records."""

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext") -> Optional[Iterable[Any]]:
        """Called when a timer of the current key fires (``timestamp`` is the timer's time). Yield output records.

        Event-time timers fire when the watermark reaches their timestamp (``timestamp <= watermark``);
        processing-time timers when the processing clock does. Inside, ``ctx.timer_service().current_watermark()``
        already returns the new watermark, and timers registered here at or before it fire in the same advance.
        """
        return None
