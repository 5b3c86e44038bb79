"""The user-facing timer service of ``ctx.timer_service()``, with PyFlink's method names."""

from __future__ import annotations

from inspect import getattr_static
from typing import Any

from keyedstate.fastpath import fastpath
from keyedstate.state.base.key_context import KEY_GROUP_FIELD, KEY_PREFIX_FIELD
from keyedstate.state.base.layout import VOID_NAMESPACE
from timers.column_queue import ColumnTimerQueue
from timers.heap_partitioned import HeapPartitionedTimerQueue
from timers.partitioned import KeyGroupPartitionedTimerQueue
from timers.queue import HeapTimerQueue
from timers.service import InternalTimerService
from timers.time import MAX_TIMESTAMP, to_epoch_millis

__all__ = ["TimerService"]


def _slot(name: str, *owners: type) -> str:
    """The slot ``name`` that all ``owners`` declare, read statically (a type checker takes a slot read on the class
    for the instance attribute); a renamed slot fails here, at import."""
    for owner in owners:
        getattr_static(owner, name)
    return name


# The partitioned queues the compiled TimerFlush handles (exact types), and the attributes it reads, taken from their
# declarations: the key context's fields, and the queues' __slots__.
_FLUSH_QUEUE_TYPES = (HeapPartitionedTimerQueue, KeyGroupPartitionedTimerQueue)
_FLUSH_FIELDS = dict(
    prefix_field=KEY_PREFIX_FIELD,
    key_group_field=KEY_GROUP_FIELD,
    firing_field=_slot("batch", *_FLUSH_QUEUE_TYPES),
    queues_field=_slot("queues", *_FLUSH_QUEUE_TYPES),
    live_field=_slot("live", HeapTimerQueue, ColumnTimerQueue),
    add_field=KeyGroupPartitionedTimerQueue.add.__name__,
    remove_field=KeyGroupPartitionedTimerQueue.remove.__name__,
)


class TimerService:
    """Timers of the current key (PyFlink's ``TimerService``), all in the void namespace.

    Times are int epoch milliseconds (aware datetimes are converted, see :mod:`timers.time`). A registered timer
    fires once, through ``on_timer``, when the watermark (event time) or processing time reaches its timestamp;
    registering the same timestamp twice for a key fires once, and deleting a timer that does not exist does nothing.

    The operator owns one, the object ``ctx.timer_service()`` returns in ``process_element`` and ``on_timer``; as
    in PyFlink it is valid only during the call that received it (see ``KeyedProcessFunction.Context`` for what a
    kept one does).
    While it runs one key's elements in a row it sets :attr:`collecting`: no timer can fire while those elements
    run (timers fire only when time advances, between runs), and a timer's final state after any sequence of
    register and delete calls is its last call. So the calls are kept per timestamp, one cheap dict store each, and
    reach the timer queues once, when the operator calls :meth:`apply_collected_calls` before the current key
    changes; a key that deletes its previous timer and registers the next one for every element touches the queue
    twice per run instead of twice per element. Otherwise (in ``on_timer``) each call goes straight to the queues,
    so a timer registered there at or before the time being advanced to fires in the same advance. Either way
    invalid timestamps fail at the call.
    """

    def __init__(self, service: InternalTimerService) -> None:
        self._service = service
        # cleared by apply_collected_calls, never replaced: the compiled calls hold them
        self._event_time: dict[int, bool] = {}
        self._processing_time: dict[int, bool] = {}
        self._collecting = False
        self._compiled_calls: tuple[Any, ...] = ()
        self._compiled_flush: Any = None  # counts what it applies itself (see timer_counts)
        self._compiled_flag: Any = None  # the one flag the compiled calls read (see collecting)
        if fastpath is not None:
            self._compiled_flag = fastpath.CollectingFlag()
            # The common call (an int timestamp in range) runs in C: stored in the dict while collecting, handed to
            # the service's own method otherwise; everything else reaches the methods below.
            for name, changes, registered in (
                ("register_event_time_timer", self._event_time, True),
                ("delete_event_time_timer", self._event_time, False),
                ("register_processing_time_timer", self._processing_time, True),
                ("delete_processing_time_timer", self._processing_time, False),
            ):
                fallback = getattr(TimerService, name).__get__(self)
                call = fastpath.TimerCall(collecting=self._compiled_flag, changes=changes, mark=registered,
                                          direct=getattr(service, name), namespace=VOID_NAMESPACE, fallback=fallback,
                                          max_timestamp=MAX_TIMESTAMP)
                setattr(self, name, call.call)
                self._compiled_calls += (call,)
            # Applying a run's calls too, to a key group whose timers are a set in memory (a heap queue, or a column
            # queue holding a new key group's timers unwritten); other queues and firing queues reach
            # apply_collected_calls() below.
            self._compiled_flush = fastpath.TimerFlush(
                context=service.backend, event_queue=service.event_queue, processing_queue=service.processing_queue,
                event_changes=self._event_time, processing_changes=self._processing_time,
                namespace=VOID_NAMESPACE, queue_types=_FLUSH_QUEUE_TYPES,
                fallback=TimerService.apply_collected_calls.__get__(self), **_FLUSH_FIELDS,
            )
            self.apply_collected_calls = self._compiled_flush.call  # type: ignore[method-assign]

    @property
    def collecting(self) -> bool:
        """True while the operator runs a key's elements (the calls are collected until
        :meth:`apply_collected_calls`); False otherwise (the calls go straight to the queues, for the current key)."""
        return self._collecting

    @collecting.setter
    def collecting(self, value: bool) -> None:
        # set twice per run of elements: one store for the Python methods, one in the flag the four compiled calls
        # share (they read it as a C field, without an attribute lookup per call)
        self._collecting = value = bool(value)
        if self._compiled_flag is not None:
            self._compiled_flag.on = value

    def current_processing_time(self) -> int:
        """The current processing time (on Spark: the micro-batch timestamp)."""
        return self._service.current_processing_time()

    def current_watermark(self) -> int:
        """The current event-time watermark (inside an event-time ``on_timer``: the watermark that fired it)."""
        return self._service.current_watermark()

    # The four calls below are what the compiled TimerCall does (keyedstate.fastpath): convert and check the
    # timestamp once, then collect it or hand it to the service.

    def register_processing_time_timer(self, timestamp: Any) -> None:
        """Call ``on_timer`` for the current key when processing time reaches ``timestamp``."""
        if self._collecting:
            self._processing_time[to_epoch_millis(timestamp)] = True
        else:
            self._service.register_processing_time_timer(VOID_NAMESPACE, timestamp)

    def register_event_time_timer(self, timestamp: Any) -> None:
        """Call ``on_timer`` for the current key when the watermark reaches ``timestamp``."""
        if self._collecting:
            self._event_time[to_epoch_millis(timestamp)] = True
        else:
            self._service.register_event_time_timer(VOID_NAMESPACE, timestamp)

    def delete_processing_time_timer(self, timestamp: Any) -> None:
        """Delete the current key's processing-time timer at ``timestamp`` (no-op when there is none)."""
        if self._collecting:
            self._processing_time[to_epoch_millis(timestamp)] = False
        else:
            self._service.delete_processing_time_timer(VOID_NAMESPACE, timestamp)

    def delete_event_time_timer(self, timestamp: Any) -> None:
        """Delete the current key's event-time timer at ``timestamp`` (no-op when there is none)."""
        if self._collecting:
            self._event_time[to_epoch_millis(timestamp)] = False
        else:
            self._service.delete_event_time_timer(VOID_NAMESPACE, timestamp)

    def apply_collected_calls(self) -> None:
        """Apply the collected calls to the current key's timers; call it before the current key changes."""
        event_time, processing_time = self._event_time, self._processing_time
        if event_time or processing_time:
            service = self._service
            registered = sum(event_time.values()) + sum(processing_time.values())
            service.timers_registered += registered
            service.timers_deleted += len(event_time) + len(processing_time) - registered
            try:
                service.apply_current_key_changes(VOID_NAMESPACE, event_time, processing_time)
            finally:
                event_time.clear()
                processing_time.clear()

    def timer_counts(self) -> tuple[int, int]:
        """Timer registrations and deletions so far, for metrics: each call made while not collecting, and once per
        timestamp a collected run registered or deleted (its last call decides which)."""
        service, compiled = self._service, self._compiled_flush
        if compiled is None:
            return service.timers_registered, service.timers_deleted
        return service.timers_registered + compiled.registered, service.timers_deleted + compiled.deleted
