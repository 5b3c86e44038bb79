"""keyedstate's timer service: Flink's event-time and processing-time timers per key.

* :class:`TimerService` is what user code gets from ``ctx.timer_service()`` (PyFlink's names), one per operator:
  while the operator runs one key's elements in a row it collects their calls and applies them to the queues once
  per key; in ``on_timer`` the calls reach the queues at once.
* :class:`InternalTimerService` is what the operator drives: register / delete per current key and namespace,
  ``advance_watermark`` / ``advance_processing_time`` fire due timers in ascending timestamp order through a
  :class:`Triggerable`, per-key-group inspection and blobs for the Spark state row, persistence with the backend.
* :class:`HeapTimerQueue`, :class:`ColumnTimerQueue`, :class:`KeyGroupPartitionedTimerQueue` and
  :class:`HeapPartitionedTimerQueue` are the queues.

See ``docs/timers.md`` for the model, ordering guarantees, persistence and the design choices.
"""

from keyedstate.api.time_domain import MAX_WATERMARK, MIN_WATERMARK, TimeDomain
from timers.codec import (
    BLOB_FORMAT_VERSION,
    RECORD_FORMAT_VERSION,
    decode_key_group_blob,
    decode_record,
    encode_key_group_blob,
    encode_record,
)
from timers.column_queue import DEFAULT_CACHE_CAPACITY, ColumnTimerQueue
from timers.heap_partitioned import HeapPartitionedTimerQueue
from timers.partitioned import KeyGroupPartitionedTimerQueue
from timers.queue import HeapTimerQueue
from timers.service import DEFAULT_SERVICE_NAME, InternalTimerService, TimerBackend
from timers.storage import TimerStorage
from timers.time import MAX_TIMESTAMP, to_epoch_millis, to_time_bound
from timers.timer import InternalTimer, Triggerable, make_timer
from timers.user_service import TimerService

__all__ = [
    "BLOB_FORMAT_VERSION",
    "DEFAULT_CACHE_CAPACITY",
    "DEFAULT_SERVICE_NAME",
    "MAX_TIMESTAMP",
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "RECORD_FORMAT_VERSION",
    "ColumnTimerQueue",
    "HeapPartitionedTimerQueue",
    "HeapTimerQueue",
    "InternalTimer",
    "InternalTimerService",
    "KeyGroupPartitionedTimerQueue",
    "TimeDomain",
    "TimerBackend",
    "TimerService",
    "TimerStorage",
    "Triggerable",
    "decode_key_group_blob",
    "decode_record",
    "encode_key_group_blob",
    "encode_record",
    "make_timer",
    "to_epoch_millis",
    "to_time_bound",
]
