"""``KeyedStateBootstrapFunction``: writes the initial keyed state of a new query from a batch of records (Flink's
State Processor API writer, with PyFlink's snake_case names).

Lifecycle of one function instance, as ``KeyedProcessFunction``'s:

1. ``open(runtime_context)`` once; get state handles here, with the same descriptors the query's function uses.
2. For each record, with its key set as the current key: ``process_element(value, ctx)``. It writes state and may
   register timers (``ctx.timer_service()``); nothing fires while bootstrapping, the timers fire in the query that
   starts from the state. It emits nothing.
3. ``close()`` once at the end.

On Spark, :func:`keyedstate.spark.bootstrap_keyed_state` runs it over a batch DataFrame and
``keyed_process(..., initial_state=...)`` starts a streaming query from what it wrote.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from keyedstate.api.process_function import Function

__all__ = ["KeyedStateBootstrapFunction"]


class KeyedStateBootstrapFunction(Function):
    """Writes keyed state (and timers) for the records of a batch, key by key.

    Subclass it and implement :meth:`process_element`; register state in ``open`` exactly as the
    ``KeyedProcessFunction`` that will read it does (same names, same types).
    """

    class Context(ABC):
        """What ``process_element`` can see: the current key and the timer service; valid only during the call it
        is passed to (see ``KeyedProcessFunction.Context``)."""

        @abstractmethod
        def get_current_key(self) -> Any:
            """The key of the record being processed (a tuple for several key columns)."""

        @abstractmethod
        def timer_service(self) -> Any:
            """The :class:`~timers.TimerService` for registering timers of the current key."""

    @abstractmethod
    def process_element(self, value: Any, ctx: "KeyedStateBootstrapFunction.Context") -> None:
        """Called for every record, with the record's key as the current key. Write state; emit nothing."""
