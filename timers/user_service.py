"""The user-facing timer service of ``ctx.timer_service()``, with PyFlink's method names."""

from __future__ import annotations

from functools import partial
from typing import Any

from keyedstate.fastpath import fastpath
from keyedstate.state.base.key_context import KEY_GROUP_FIELD, KEY_PREFIX_FIELD
from keyedstate.state.base.layout import VOID_NAMESPACE
from timers.heap_partitioned import HeapPartitionedTimerQueue
from timers.queue import HeapTimerQueue
from timers.service import InternalTimerService
from timers.time import MAX_TIMESTAMP, to_epoch_millis

__all__ = ["TimerService", "CoalescingTimerService", "COLLECTING_FIELD"]

COLLECTING_FIELD = "collecting"
"""The name of :attr:`CoalescingTimerService.collecting` (read by the compiled ``TimerCall``)."""

# The attributes the compiled TimerFlush reads, taken from their declarations: the key context's fields, and the
# queues' __slots__ (a renamed slot makes this line fail at import).
_FLUSH_FIELDS = dict(
    prefix_field=KEY_PREFIX_FIELD,
    key_group_field=KEY_GROUP_FIELD,
    firing_field=HeapPartitionedTimerQueue.batch.__name__,  # type: ignore[attr-defined]
    queues_field=HeapPartitionedTimerQueue.queues.__name__,  # type: ignore[attr-defined]
    live_field=HeapTimerQueue.live.__name__,  # type: ignore[attr-defined]
    add_field=HeapPartitionedTimerQueue.add.__name__,
    remove_field=HeapPartitionedTimerQueue.remove.__name__,
)

_BOUND_TO_SERVICE = (
    "register_event_time_timer",
    "delete_event_time_timer",
    "register_processing_time_timer",
    "delete_processing_time_timer",
)


class TimerService:
    """Timers of the current key (PyFlink's ``TimerService``), all in the void namespace.

    Times are int epoch milliseconds (aware datetimes are converted, see :mod:`timers.time`). A registered timer
    fires once, through ``on_timer``, when the watermark (event time) or processing time reaches its timestamp;
    registering the same timestamp twice for a key fires once, and deleting a timer that does not exist does nothing.
    """

    def __init__(self, service: InternalTimerService) -> None:
        self._service = service
        # User functions call these once or twice per element: bound partials (C) stand in for the methods below,
        # which document them, and save a Python call each.
        for name in _BOUND_TO_SERVICE:
            setattr(self, name, partial(getattr(service, name), VOID_NAMESPACE))

    def current_processing_time(self) -> int:
        """The current processing time (on Spark: the micro-batch timestamp)."""
        return self._service.current_processing_time()

    def current_watermark(self) -> int:
        """The current event-time watermark (inside an event-time ``on_timer``: the watermark that fired it)."""
        return self._service.current_watermark()

    def register_processing_time_timer(self, timestamp: Any) -> None:
        """Call ``on_timer`` for the current key when processing time reaches ``timestamp``."""
        self._service.register_processing_time_timer(VOID_NAMESPACE, timestamp)

    def register_event_time_timer(self, timestamp: Any) -> None:
        """Call ``on_timer`` for the current key when the watermark reaches ``timestamp``."""
        self._service.register_event_time_timer(VOID_NAMESPACE, timestamp)

    def delete_processing_time_timer(self, timestamp: Any) -> None:
        """Delete the current key's processing-time timer at ``timestamp`` (no-op when there is none)."""
        self._service.delete_processing_time_timer(VOID_NAMESPACE, timestamp)

    def delete_event_time_timer(self, timestamp: Any) -> None:
        """Delete the current key's event-time timer at ``timestamp`` (no-op when there is none)."""
        self._service.delete_event_time_timer(VOID_NAMESPACE, timestamp)


class CoalescingTimerService(TimerService):
    """The ``TimerService`` that ``process_element`` gets while the operator runs one key's elements in a row.

    No timer can fire while those elements run (timers fire only when time advances, between runs), and a timer's
    final state after any sequence of register and delete calls is its last call. So the calls are kept per
    timestamp, one cheap dict store each, and reach the timer queues once, when the operator calls :meth:`flush`
    before the current key changes. A key that deletes its previous timer and registers the next one for every
    element then touches the queue twice per run instead of twice per element. What user code observes is the same
    as with :class:`TimerService`: invalid timestamps still fail at the call.
    """

    def __init__(self, service: InternalTimerService) -> None:
        # not TimerService.__init__: it would bind the direct calls over the methods below
        self._service = service
        self._event_time: dict[int, bool] = {}  # cleared by flush, never replaced: the compiled calls hold them
        self._processing_time: dict[int, bool] = {}
        self.collecting = False
        """Set by the operator while a run of elements is under way. Outside a run (a user function that kept this
        object and calls it from ``on_timer``) the calls go straight to the queues, for the key current then."""
        if fastpath is not None:
            # The common call (an int timestamp in range, while collecting) runs in C; everything else reaches the
            # methods below.
            for name, changes, registered in (
                ("register_event_time_timer", self._event_time, True),
                ("delete_event_time_timer", self._event_time, False),
                ("register_processing_time_timer", self._processing_time, True),
                ("delete_processing_time_timer", self._processing_time, False),
            ):
                fallback = getattr(CoalescingTimerService, name).__get__(self)
                call = fastpath.TimerCall(owner=self, collecting_field=COLLECTING_FIELD, changes=changes,
                                          mark=registered, fallback=fallback, max_timestamp=MAX_TIMESTAMP)
                setattr(self, name, call.call)
            # Applying a run's calls to the heap queues too; other queues and firing queues reach flush() below.
            self.flush = fastpath.TimerFlush(  # type: ignore[method-assign]
                context=service.backend, event_queue=service.event_queue, processing_queue=service.processing_queue,
                event_changes=self._event_time, processing_changes=self._processing_time,
                namespace=VOID_NAMESPACE, queue_type=HeapPartitionedTimerQueue,
                fallback=CoalescingTimerService.flush.__get__(self), **_FLUSH_FIELDS,
            ).call

    def register_processing_time_timer(self, timestamp: Any) -> None:
        """Call ``on_timer`` for the current key when processing time reaches ``timestamp``."""
        self._collect(self._processing_time, True, self._service.register_processing_time_timer, timestamp)

    def register_event_time_timer(self, timestamp: Any) -> None:
        """Call ``on_timer`` for the current key when the watermark reaches ``timestamp``."""
        self._collect(self._event_time, True, self._service.register_event_time_timer, timestamp)

    def delete_processing_time_timer(self, timestamp: Any) -> None:
        """Delete the current key's processing-time timer at ``timestamp`` (no-op when there is none)."""
        self._collect(self._processing_time, False, self._service.delete_processing_time_timer, timestamp)

    def delete_event_time_timer(self, timestamp: Any) -> None:
        """Delete the current key's event-time timer at ``timestamp`` (no-op when there is none)."""
        self._collect(self._event_time, False, self._service.delete_event_time_timer, timestamp)

    def _collect(self, changes: dict, registered: bool, direct: Any, timestamp: Any) -> None:
        """While collecting, the last call per timestamp wins (``changes``); otherwise the call goes straight to the
        service (``direct``), as in ``on_timer``."""
        timestamp = to_epoch_millis(timestamp)  # the one timestamp check (timers.time)
        if self.collecting:
            changes[timestamp] = registered
        else:
            direct(VOID_NAMESPACE, timestamp)

    def flush(self) -> None:
        """Apply the collected calls to the current key's timers; call it before the current key changes."""
        event_time, processing_time = self._event_time, self._processing_time
        if event_time or processing_time:
            try:
                self._service.apply_current_key_changes(VOID_NAMESPACE, event_time, processing_time)
            finally:
                event_time.clear()
                processing_time.clear()
