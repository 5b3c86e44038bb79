"""``KeyedCoProcessFunction``: two inputs keyed the same way, sharing each key's state and timers (PyFlink's names).

Its lifecycle is ``KeyedProcessFunction``'s (:mod:`keyedstate.api.process_function`) with one element callback per
input: ``process_element1(value, ctx)`` for each element of the first input, ``process_element2(value, ctx)`` for
each of the second, both with the element's key current and seeing the same state objects and timers for that key.
The watermark of a two-input function is the minimum of its two inputs' watermarks (in the test harness,
``process_watermark1`` / ``process_watermark2`` advance one input's).
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
