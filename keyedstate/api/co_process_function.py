"""``KeyedCoProcessFunction``: two inputs keyed the same way, sharing each key's state and timers (PyFlink's names).

Lifecycle of one function instance (one per partition), the same as ``KeyedProcessFunction``'s:

1. ``open(runtime_context)`` once, before any element or timer; get state handles here.
2. For each element of the first input, with its key set as the current key: ``process_element1(value, ctx)``;
   for each element of the second input: ``process_element2(value, ctx)``. Both see the same state objects and the
   same timers for the same key.
3. Whenever the watermark advances (event time) or the processing clock advances (processing time), for every timer
   that became due, in ascending timestamp order and with the timer's key set as the current key:
   ``on_timer(timestamp, ctx)``. The watermark of a two-input function is the minimum of its two inputs'
   watermarks. On Spark both clocks advance at the start of every micro-batch, before the batch's elements are
   processed; in the test harness they advance when the test calls ``process_watermark`` (or
   ``process_watermark1`` / ``process_watermark2``) or ``set_processing_time``.
4. ``close()`` once at the end.

The three callbacks never run concurrently, and never concurrently with a snapshot. All are generators:
``yield record`` emits to the main output, ``yield output_tag, value`` (or ``ctx.output(tag, value)``) to a side
output.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Iterable, Optional

from keyedstate.api.process_function import Function, KeyedProcessFunction

__all__ = ["KeyedCoProcessFunction"]


class KeyedCoProcessFunction(Function):
    """Processes the elements of two keyed streams, with keyed state and timers shared by both.

    Subclass it and implement :meth:`process_element1` and :meth:`process_element2` (both required) and
    :meth:`on_timer` (when you register timers).
    """

    Context = KeyedProcessFunction.Context
    """The same context as ``KeyedProcessFunction``'s: key, element timestamp, timers, side outputs."""

    OnTimerContext = KeyedProcessFunction.OnTimerContext
    """``on_timer``'s context: ``timestamp()`` is the timer's time; ``time_domain()`` says which clock fired."""

    @abstractmethod
    def process_element1(self, value: Any, ctx: "KeyedProcessFunction.Context") -> Optional[Iterable[Any]]:
        """Called for every element of the first input, with the element's key as the current key."""

    @abstractmethod
    def process_element2(self, value: Any, ctx: "KeyedProcessFunction.Context") -> Optional[Iterable[Any]]:
        """Called for every element of the second input, with the element's key as the current key."""

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext") -> Optional[Iterable[Any]]:
        """Called when a timer of the current key fires, whichever input's element registered it.

        Event-time timers fire when the combined watermark (the minimum of both inputs') reaches their timestamp;
        processing-time timers when the processing clock does.
        """
        return None
