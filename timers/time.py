"""Validation of times: every time keyedstate stores is an ``int`` of epoch milliseconds.

Accepted for a timer timestamp:

* ``int`` (and ``int`` subclasses other than ``bool``, such as ``IntEnum``) and numpy integers, in
  ``0 .. 2**63 - 1`` (Flink's ``Long.MAX_VALUE``);
* timezone-aware :class:`datetime.datetime` (including ``pandas.Timestamp`` with a timezone), converted to epoch
  milliseconds, rounding sub-millisecond parts *down* (``floor``), so a timer never fires before its datetime.

Rejected with :class:`~keyedstate.errors.InvalidTimestampError`: ``bool``, floats (including whole floats such as
``5.0`` and NaN), negative values, values above ``2**63 - 1``, naive datetimes (their meaning depends on the machine's
time zone), dates, strings and ``None``.

Watermarks and processing times given to the service accept the same types but may be negative (down to Flink's
``Long.MIN_VALUE``), because a watermark starts there.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from keyedstate.api.time_domain import MAX_WATERMARK, MIN_WATERMARK
from keyedstate.errors import InvalidTimestampError

__all__ = ["MAX_TIMESTAMP", "MIN_WATERMARK", "MAX_WATERMARK", "to_epoch_millis", "to_time_bound"]

MAX_TIMESTAMP = MAX_WATERMARK
"""The largest timer timestamp: ``2**63 - 1``; a timer there fires only at the end of input."""

_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_ONE_MS = _dt.timedelta(milliseconds=1)

try:  # numpy comes with pandas; timestamps taken from pandas frames are numpy integers
    import numpy as _np

    _NUMPY_INTEGER: tuple[type[Any], ...] = (_np.integer,)
    _NUMPY_BOOL: tuple[type[Any], ...] = (_np.bool_,)
except ImportError:  # pragma: no cover - numpy is a transitive dependency
    _NUMPY_INTEGER = _NUMPY_BOOL = ()


def _convert(value: Any, what: str) -> int:
    """``value`` as an int of epoch milliseconds, without a range check."""
    kind = type(value)
    if kind is int:
        return value
    if kind is bool or (_NUMPY_BOOL and isinstance(value, _NUMPY_BOOL)):
        raise InvalidTimestampError(
            f"{what} must be an int of epoch milliseconds, got the bool {value!r}; pass an int such as 1700000000000"
        )
    if isinstance(value, int) or (_NUMPY_INTEGER and isinstance(value, _NUMPY_INTEGER)):
        return int(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise InvalidTimestampError(
                f"{what} is the naive datetime {value.isoformat()}, which has no time zone, so its epoch "
                f"milliseconds depend on the machine; pass an aware datetime (for example "
                f"datetime(..., tzinfo=timezone.utc)) or an int of epoch milliseconds"
            )
        return (value - _EPOCH_UTC) // _ONE_MS
    if isinstance(value, float):
        if value != value:
            raise InvalidTimestampError(
                f"{what} is NaN; timers need an int of epoch milliseconds (check the event-time field for missing "
                f"values)"
            )
        raise InvalidTimestampError(
            f"{what} must be an int of epoch milliseconds, got the float {value!r}; convert it explicitly, for "
            f"example int({value!r}), so no precision is lost silently"
        )
    if isinstance(value, _dt.date):
        raise InvalidTimestampError(
            f"{what} is the date {value.isoformat()}, which has no time of day and no time zone; pass an aware "
            f"datetime or an int of epoch milliseconds"
        )
    raise InvalidTimestampError(
        f"{what} must be an int of epoch milliseconds (or an aware datetime), got {type(value).__qualname__} "
        f"{value!r}"
    )


def to_epoch_millis(value: Any, what: str = "timer timestamp") -> int:
    """``value`` as a timer timestamp: an int in ``0 .. 2**63 - 1``; raise ``InvalidTimestampError`` otherwise."""
    if type(value) is int and 0 <= value <= MAX_TIMESTAMP:  # the hot path
        return value
    millis = _convert(value, what)
    if millis < 0:
        raise InvalidTimestampError(
            f"{what} {value!r} is negative; timers take non-negative epoch milliseconds (0 is 1970-01-01T00:00Z)"
        )
    if millis > MAX_TIMESTAMP:
        raise InvalidTimestampError(f"{what} {value!r} is larger than Long.MAX_VALUE (2**63 - 1)")
    return millis


def to_time_bound(value: Any, what: str) -> int:
    """``value`` as a watermark or processing time: an int in ``-2**63 .. 2**63 - 1``."""
    if type(value) is int and MIN_WATERMARK <= value <= MAX_WATERMARK:
        return value
    millis = _convert(value, what)
    if not (MIN_WATERMARK <= millis <= MAX_WATERMARK):
        raise InvalidTimestampError(f"{what} {value!r} is outside the range of a Java long (-2**63 .. 2**63 - 1)")
    return millis
