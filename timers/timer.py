"""The timer value and the callback protocol of the timer service."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from keyedstate.serialization import decode_key
from keyedstate.state.base.layout import KEY_GROUP_PREFIX_BYTES

__all__ = ["InternalTimer", "TimerTuple", "Triggerable", "make_timer"]

#: A timer as the queues hold it: the plain ``(timestamp, key_prefix, namespace, key_group)`` tuple (an
#: :class:`InternalTimer` is one too, with named accessors).
TimerTuple = tuple[int, bytes, bytes, int]


class InternalTimer(tuple[int, bytes, bytes, int]):
    """A registered timer: ``(timestamp, key_prefix, namespace, key_group)``, with named accessors.

    Inside the queues a timer is the plain tuple of the same four fields (equal and hashing equal to this view,
    cheaper to build); the service hands out :class:`InternalTimer` s.

    ``key_prefix`` is the backend's stored-key prefix of the timer's key (2-byte big-endian key group + the
    deterministic key encoding) and ``namespace`` the encoded namespace. A timer is identified by (key, namespace,
    timestamp); ``key_group`` is derived from the key, so it never makes two timers differ.

    Timers are plain tuples underneath, so queues compare them in C: ascending timestamp first, then key-group prefix
    and key bytes, then namespace bytes. That makes firing order deterministic, but only the timestamp order is a
    guarantee (as in Flink, the order among equal timestamps is unspecified).
    """

    __slots__ = ()

    @property
    def timestamp(self) -> int:
        """When the timer fires, in epoch milliseconds."""
        return self[0]

    @property
    def key_prefix(self) -> bytes:
        return self[1]

    @property
    def namespace(self) -> bytes:
        """The encoded namespace (``VOID_NAMESPACE`` for user timers)."""
        return self[2]

    @property
    def key_group(self) -> int:
        return self[3]

    @property
    def encoded_key(self) -> bytes:
        return self[1][KEY_GROUP_PREFIX_BYTES:]

    @property
    def key(self) -> Any:
        """The user key (decoded from its stored encoding on every access)."""
        return decode_key(self[1], KEY_GROUP_PREFIX_BYTES)[0]

    def get_timestamp(self) -> int:  # Flink's name
        return self[0]

    def get_key(self) -> Any:  # Flink's name
        return self.key

    def get_namespace(self) -> bytes:  # Flink's name
        return self[2]

    def __repr__(self) -> str:
        try:
            key = repr(self.key)
        except Exception:  # pragma: no cover - corrupt key bytes
            key = self[1].hex()
        return f"InternalTimer(timestamp={self[0]}, key={key}, namespace={self[2]!r}, key_group={self[3]})"

    def __reduce__(self) -> Any:
        return (InternalTimer, (tuple(self),))


def make_timer(timestamp: int, key_prefix: bytes, namespace: bytes) -> InternalTimer:
    """A timer from its parts; the key group is read from the prefix."""
    key_group = int.from_bytes(key_prefix[:KEY_GROUP_PREFIX_BYTES], "big")
    return InternalTimer((timestamp, key_prefix, namespace, key_group))


@runtime_checkable
class Triggerable(Protocol):
    """What the timer service calls when a timer fires (Flink's ``Triggerable``).

    Before each call the service has set the backend's current key to the timer's key, and
    ``current_watermark()`` / ``current_processing_time()`` already return the time being advanced to.

    The queues hold timers as plain tuples, laid out as :class:`InternalTimer`. The service builds an
    :class:`InternalTimer` for each call unless the triggerable sets ``accepts_timer_tuples = True``; it then gets
    the plain ``(timestamp, key_prefix, namespace, key_group)`` tuple and saves one object per firing (the operator
    does this).
    """

    accepts_timer_tuples: bool = False

    def on_event_time(self, timer: InternalTimer) -> None:
        """An event-time timer fired: the watermark reached ``timer.timestamp``."""
        ...

    def on_processing_time(self, timer: InternalTimer) -> None:
        """A processing-time timer fired: processing time reached ``timer.timestamp``."""
        ...
