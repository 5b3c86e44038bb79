"""The internal timer service: event-time and processing-time timers per key (Flink's ``InternalTimerServiceImpl``).

When timers fire, and in which order
------------------------------------
* Event-time timers fire in :meth:`InternalTimerService.advance_watermark` when ``timestamp <= watermark``;
  processing-time timers fire in :meth:`InternalTimerService.advance_processing_time` when
  ``timestamp <= processing time``. Nothing fires at any other moment: registration never fires a timer.
* Within one advance, timers fire one at a time in ascending timestamp order over all key groups (ties are broken
  by key group, key and namespace bytes, which is deterministic but not part of the contract).
* Before each callback the backend's current key is set to the timer's key and :attr:`current_namespace` to its
  namespace, and ``current_watermark()`` / ``current_processing_time()`` already return the time being advanced to.
* A timer registered from a callback with a timestamp <= that time fires in the same advance, after the callback
  returns. A timer registered from ``process_element`` with a timestamp <= the current watermark is accepted (late
  registrations are never rejected) and fires at the next advance, which may be to the same watermark.
* The watermark never goes back: advancing to a smaller watermark keeps the current one (and still fires timers that
  are due at it). :meth:`end_of_input` advances it to ``2**63 - 1`` so every event-time timer fires; pending
  processing-time timers do not fire at end of input.
* A timer is (key, namespace, timestamp): registering it again is a no-op, deleting an unregistered timer is a
  silent no-op.
* An exception from a callback propagates out of the advance; the timer that was firing has already been removed
  (as in Flink, where the job then restarts from the last checkpoint, which still holds it). Timers after it stay
  registered and fire at the next advance.

Persistence: see :mod:`timers.storage`. The service registers a pre-snapshot hook on the backend. A key group is
saved and restored through :mod:`keyedstate.state.key_groups`: row mode carries the group's timers as one blob
(:meth:`InternalTimerService.export_key_group` / :meth:`~InternalTimerService.import_key_group`); RocksDB mode keeps
them in the raw columns of the stored database, and :meth:`~InternalTimerService.reload_key_group` re-reads them
after a restore (a service created after its raw columns were filled reads them itself). The watermark and
processing time are not part of a snapshot (as in Flink, they start at ``Long.MIN_VALUE`` after a restore), so
overdue processing-time timers fire at the first :meth:`advance_processing_time` after the restore.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Protocol, Union

from keyedstate.api.time_domain import TimeDomain
from keyedstate.errors import ConfigurationError, KeyGroupNotOwnedError, SerializationError
from keyedstate.state.base.key_context import KeyContext
from keyedstate.state.base.stores import RawColumn
from timers.codec import decode_key_group_blob, encode_key_group_blob
from timers.column_queue import DEFAULT_CACHE_CAPACITY
from timers.storage import TimeDomainQueue, TimerStorage, resolve_storage
from timers.time import MAX_WATERMARK, MIN_WATERMARK, to_epoch_millis, to_time_bound
from timers.timer import InternalTimer, Triggerable

__all__ = ["InternalTimerService", "TimerBackend", "DEFAULT_SERVICE_NAME"]

_KEY_CACHE_SIZE = 1 << 16
_BASE_SET_KEY_WITH_PREFIX = KeyContext.set_current_key_with_prefix
_new_timer = tuple.__new__  # InternalTimer((...)) through type.__call__ costs ~2x as much

DEFAULT_SERVICE_NAME = "user-timers"
"""Flink's name of the timer service of a ``KeyedProcessOperator``."""


class TimerBackend(Protocol):
    """Everything the timer service uses of the backend it serves: a :class:`KeyContext` (the current key, read and
    set while registering and firing), plus the raw columns and the snapshot hook its timers persist through.
    Every ``KeyedStateBackend`` is one; :mod:`timers` imports nothing else of a backend."""

    backend_kind: str
    key_group_range: Any  # ``start``/``end`` inclusive and ``in``: the owned key groups
    key: Any
    key_group: int
    key_prefix: Optional[bytes]

    def set_current_key_from_prefix(self, prefix: bytes) -> Any: ...
    def set_current_key_with_prefix(self, key: Any, prefix: bytes) -> None: ...
    @property
    def current_key_prefix(self) -> bytes: ...
    def raw_column(self, name: str) -> RawColumn: ...
    def add_pre_snapshot_hook(self, hook: Callable[[], None]) -> None: ...


def _as_timer(timer: tuple) -> InternalTimer:
    """The :class:`InternalTimer` view of a queue's plain timer tuple."""
    return timer if type(timer) is InternalTimer else _new_timer(InternalTimer, timer)


class InternalTimerService:
    """Event-time and processing-time timers of the keys of ``backend``, persisted with its snapshots.

    ``triggerable`` receives the firing timers (see :class:`~timers.timer.Triggerable`). ``name`` tells several
    services of one backend apart (each gets the raw columns ``_timer_state/event_<name>`` and
    ``_timer_state/processing_<name>``). ``storage``: ``"heap"`` or ``"rocksdb"``, by default RocksDB on the
    RocksDB backend and heap otherwise. Not thread-safe; like the backend it belongs to one operator.
    """

    def __init__(
        self,
        backend: TimerBackend,
        triggerable: Optional[Triggerable] = None,
        *,
        name: str = DEFAULT_SERVICE_NAME,
        storage: Union[TimerStorage, str, None] = None,
        cache_capacity: int = DEFAULT_CACHE_CAPACITY,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a timer service needs a non-empty str name, got {name!r}")
        self.backend = backend
        self.name = name
        self.storage = resolve_storage(storage, backend)
        self.triggerable = triggerable
        self._event = TimeDomainQueue(backend, f"_timer_state/event_{name}", self.storage, cache_capacity)
        self._processing = TimeDomainQueue(backend, f"_timer_state/processing_{name}", self.storage, cache_capacity)
        self.event_queue = self._event.queue
        self.processing_queue = self._processing.queue
        self._event_add = self.event_queue.add
        self._processing_add = self.processing_queue.add
        # prefix -> decoded key, so firing many timers of one key decodes the key once (bounded; see _fire)
        self._keys: dict[bytes, Any] = {}
        self._watermark = MIN_WATERMARK
        self._processing_time = MIN_WATERMARK
        self.current_namespace: Optional[bytes] = None
        """The namespace of the firing timer while a callback runs."""
        self.timers_registered = 0
        """Registrations so far, for metrics: each call, and each timestamp a collected run registered that the
        Python flush applied (the compiled one counts its own: ``TimerService.timer_counts`` adds them up)."""
        self.timers_deleted = 0
        """Deletions so far, counted like :attr:`timers_registered` (a deletion of an unregistered timer counts)."""
        backend.add_pre_snapshot_hook(self.write_to_columns)

    def set_triggerable(self, triggerable: Triggerable) -> None:
        self.triggerable = triggerable

    def _timer(self, namespace: bytes, timestamp: Any) -> tuple:
        """The current key's timer at ``timestamp`` as the queues hold it: a plain tuple (see
        :class:`InternalTimer`)."""
        timestamp = to_epoch_millis(timestamp)  # the one timestamp check (timers.time)
        prefix = self.backend.current_key_prefix  # raises NoKeyContextError without a current key
        if type(namespace) is not bytes:
            raise ConfigurationError(
                f"timer namespaces are encoded bytes (keyedstate.serialization.encode_key(...), or VOID_NAMESPACE), "
                f"got {type(namespace).__qualname__}"
            )
        return (timestamp, prefix, namespace, (prefix[0] << 8) | prefix[1])

    def register_event_time_timer(self, namespace: bytes, timestamp: Any) -> None:
        """Fire ``on_event_time`` for the current key once the watermark reaches ``timestamp`` (epoch ms)."""
        # the body of _timer without its calls: this runs once per registration
        timestamp = to_epoch_millis(timestamp)  # the one timestamp check (timers.time)
        backend = self.backend
        prefix = backend.key_prefix  # the key context's field (hot path); None without a current key
        if prefix is None or type(namespace) is not bytes:
            self._timer(namespace, timestamp)  # raises NoKeyContextError or the namespace error
            raise AssertionError("unreachable")
        self._event_add((timestamp, prefix, namespace, backend.key_group))
        self.timers_registered += 1

    def delete_event_time_timer(self, namespace: bytes, timestamp: Any) -> None:
        """Remove the current key's event-time timer at ``timestamp``; a no-op when there is none."""
        self.event_queue.remove(self._timer(namespace, timestamp))
        self.timers_deleted += 1

    def register_processing_time_timer(self, namespace: bytes, timestamp: Any) -> None:
        """Fire ``on_processing_time`` for the current key once processing time reaches ``timestamp`` (epoch ms)."""
        # the body of _timer without its calls: this runs once per registration
        timestamp = to_epoch_millis(timestamp)  # the one timestamp check (timers.time)
        backend = self.backend
        prefix = backend.key_prefix  # the key context's field (hot path); None without a current key
        if prefix is None or type(namespace) is not bytes:
            self._timer(namespace, timestamp)  # raises NoKeyContextError or the namespace error
            raise AssertionError("unreachable")
        self._processing_add((timestamp, prefix, namespace, backend.key_group))
        self.timers_registered += 1

    def delete_processing_time_timer(self, namespace: bytes, timestamp: Any) -> None:
        """Remove the current key's processing-time timer at ``timestamp``; a no-op when there is none."""
        self.processing_queue.remove(self._timer(namespace, timestamp))
        self.timers_deleted += 1

    def apply_current_key_changes(self, namespace: bytes, event_time: dict[int, bool],
                                  processing_time: dict[int, bool]) -> None:
        """Apply collected registrations (True) and deletions (False) of the current key's timers, per timestamp.

        The net effect of any sequence of register/delete calls on one timer is its last call, so
        :class:`~timers.user_service.TimerService` keeps only that and hands it over here. Timestamps must
        already be validated epoch milliseconds.
        """
        backend = self.backend
        prefix = backend.key_prefix
        if prefix is None or type(namespace) is not bytes:
            self._timer(namespace, 0)  # raises NoKeyContextError or the namespace error
            raise AssertionError("unreachable")
        if event_time:
            self.event_queue.apply_changes(event_time, prefix, namespace, backend.key_group)
        if processing_time:
            self.processing_queue.apply_changes(processing_time, prefix, namespace, backend.key_group)

    def current_watermark(self) -> int:
        """The watermark: ``-2**63`` until the first advance; inside event-time callbacks already the new one."""
        return self._watermark

    def current_processing_time(self) -> int:
        """The processing time last advanced to (``-2**63`` before the first advance)."""
        return self._processing_time

    def advance_watermark(self, watermark: Any) -> int:
        """Move the watermark to ``watermark`` (never back) and fire every event-time timer ``<=`` it, ascending.

        Timers registered by the callbacks at or before the watermark fire in this same call. Returns the number of
        timers fired.
        """
        watermark = to_time_bound(watermark, "watermark")
        if watermark > self._watermark:
            self._watermark = watermark
        return self._fire(self._event, self._watermark, True)

    def advance_processing_time(self, now: Any) -> int:
        """Move processing time to ``now`` (never back) and fire every processing-time timer ``<=`` it, ascending.

        Overdue timers (registered in the past, or restored from a snapshot) fire at the first call. Returns the
        number of timers fired.
        """
        now = to_time_bound(now, "processing time")
        if now > self._processing_time:
            self._processing_time = now
        return self._fire(self._processing, self._processing_time, False)

    def end_of_input(self) -> int:
        """End of a bounded input: the watermark jumps to ``2**63 - 1`` and every event-time timer fires.

        Processing-time timers are left pending (as in Flink).
        """
        return self.advance_watermark(MAX_WATERMARK)

    def _fire(self, domain: TimeDomainQueue, limit: int, event_time: bool) -> int:
        triggerable = self.triggerable
        if triggerable is None:
            head = domain.queue.peek()
            if head is None or head[0] > limit:
                return 0
            raise ConfigurationError("timers are due but the timer service has no triggerable; call set_triggerable")
        # takes InternalTimers, or the queues' plain tuples when the triggerable accepts_timer_tuples
        callback: Callable[[Any], None] = triggerable.on_event_time if event_time else triggerable.on_processing_time
        wrap = not getattr(triggerable, "accepts_timer_tuples", False)
        backend = self.backend
        set_key_from_prefix = backend.set_current_key_from_prefix
        set_key_with_prefix = backend.set_current_key_with_prefix
        keys = self._keys
        direct = type(backend).set_current_key_with_prefix is _BASE_SET_KEY_WITH_PREFIX
        fired = 0
        steps = domain.queue.due(limit)
        try:
            for timer in steps:
                prefix = timer[1]
                if prefix is not backend.key_prefix:  # consecutive timers of one key keep its context
                    key = keys.get(prefix)
                    if key is None:
                        if len(keys) >= _KEY_CACHE_SIZE:
                            keys.clear()
                        keys[prefix] = set_key_from_prefix(prefix)
                    elif direct:  # the key context's three fields, without a call per timer
                        backend.key = key
                        backend.key_group = timer[3]
                        backend.key_prefix = prefix
                    else:
                        set_key_with_prefix(key, prefix)
                self.current_namespace = timer[2]
                callback(_new_timer(InternalTimer, timer) if wrap else timer)
                fired += 1
        finally:
            steps.close()  # after a callback raised, the queue takes back the due timers it has not fired
            if self.storage is TimerStorage.ROCKSDB:
                domain.flush(write_deferred=False)  # the deferred deletes of the fired timers
        return fired

    def _domain(self, domain: TimeDomain) -> TimeDomainQueue:
        if domain is TimeDomain.EVENT_TIME:
            return self._event
        if domain is TimeDomain.PROCESSING_TIME:
            return self._processing
        raise ConfigurationError(f"unknown time domain {domain!r}; use TimeDomain.EVENT_TIME or PROCESSING_TIME")

    def num_event_time_timers(self, key_group: Optional[int] = None) -> int:
        """Registered event-time timers (of one key group, or all)."""
        return self._event.queue.count(key_group)

    def num_processing_time_timers(self, key_group: Optional[int] = None) -> int:
        """Registered processing-time timers (of one key group, or all)."""
        return self._processing.queue.count(key_group)

    def earliest_timer(self, domain: TimeDomain, key_group: Optional[int] = None) -> Optional[InternalTimer]:
        """The next timer to fire in ``domain`` (of one key group, or over all), or None."""
        queue = self._domain(domain).queue
        timer = queue.peek() if key_group is None else queue.earliest(key_group)
        return None if timer is None else _as_timer(timer)

    def timers(self, domain: TimeDomain, key_group: Optional[int] = None) -> Iterator[InternalTimer]:
        """Every timer of ``domain`` (of one key group ascending, or all: by key group, then ascending)."""
        queue = self._domain(domain).queue
        return map(_as_timer, iter(queue) if key_group is None else queue.timers_of(key_group))

    def key_groups_with_timers(self) -> list[int]:
        """Key groups with at least one timer in either domain, ascending."""
        return sorted(set(self._event.queue.key_groups()) | set(self._processing.queue.key_groups()))

    # ---- key groups as bytes (the Spark state row) -------------------------------------------------------------

    def export_key_group(self, key_group: int) -> bytes:
        """All timers of ``key_group`` (both domains) as one compact, versioned blob (see :mod:`timers.codec`)."""
        self._check_owned(key_group)
        return encode_key_group_blob(
            key_group, self._event.queue.timers_of(key_group), self._processing.queue.timers_of(key_group)
        )

    def import_key_group(self, blob: bytes, key_group: Optional[int] = None) -> int:
        """Replace all timers of the blob's key group by the blob's timers; return the key group.

        When ``key_group`` is given, a blob of another key group is rejected.
        """
        blob_group, event_timers, processing_timers = decode_key_group_blob(blob)
        if key_group is not None and blob_group != key_group:
            raise SerializationError(f"timer blob belongs to key group {blob_group}, not {key_group}")
        self._check_owned(blob_group)
        self._event.queue.replace_key_group(blob_group, event_timers)
        self._processing.queue.replace_key_group(blob_group, processing_timers)
        return blob_group

    def reload_key_group(self, key_group: int, counts: Optional[tuple[int, int]] = None, new: bool = False) -> None:
        """Forget what is cached of ``key_group``'s timers and read their heads again from the raw columns: the
        backend's database changed under the service (RocksDB storage only; heap timers live in the queues).
        ``counts``: the (event-time, processing-time) numbers of timers the database holds, when the caller knows
        them (:meth:`counted_timers` of an earlier call), so counting them needs no scan. ``new``: the database holds
        no timer of the key group because it holds nothing (RocksDB mode's first call of a key group): its timers
        reach the columns at the flush before a snapshot, not one by one (``ColumnTimerQueue.defer_writes``)."""
        if self.storage is not TimerStorage.ROCKSDB:
            raise ConfigurationError("reload_key_group needs RocksDB timer storage; heap timers are not re-read")
        self._check_owned(key_group)
        for domain, count in zip((self._event, self._processing), counts or (None, None)):
            domain.queue.forget(key_group)
            queue = domain.queue.queue(key_group)
            if new:
                queue.defer_writes()
            elif count is not None:
                queue.count = count

    def counted_timers(self, key_group: int) -> Optional[tuple[int, int]]:
        """The (event-time, processing-time) numbers of ``key_group``'s timers when both are known without a scan
        (RocksDB storage: counted once, then kept up to date by every change), else None."""
        if self.storage is not TimerStorage.ROCKSDB:
            return None
        event, processing = (domain.queue.queues.get(key_group) for domain in (self._event, self._processing))
        if event is None or processing is None or event.count is None or processing.count is None:
            return None
        return event.count, processing.count

    def forget_key_group(self, key_group: int) -> None:
        """Drop the cached timers of ``key_group`` (RocksDB storage: the stored ones stay in the database)."""
        for domain in (self._event, self._processing):
            domain.queue.forget(key_group)

    def clear_key_group(self, key_group: int) -> None:
        """Remove every timer of ``key_group`` in both domains."""
        self._check_owned(key_group)
        self._event.queue.replace_key_group(key_group, ())
        self._processing.queue.replace_key_group(key_group, ())

    def _check_owned(self, key_group: int) -> None:
        if key_group not in self.backend.key_group_range:
            raise KeyGroupNotOwnedError(
                f"key group {key_group} is not owned by this backend (key groups {self.backend.key_group_range.start}"
                f"..{self.backend.key_group_range.end})"
            )

    def write_to_columns(self) -> None:
        """Bring the raw columns up to date (heap: write changed key groups; RocksDB: deferred deletes of fired
        timers); runs as the backend's pre-snapshot hook."""
        self._event.flush()
        self._processing.flush()

    def __repr__(self) -> str:
        return (
            f"InternalTimerService(name={self.name!r}, storage={self.storage.value}, "
            f"event_time_timers={self.num_event_time_timers()}, "
            f"processing_time_timers={self.num_processing_time_timers()}, watermark={self._watermark})"
        )
