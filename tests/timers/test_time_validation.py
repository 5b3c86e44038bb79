"""Times are int epoch milliseconds; bad input fails clearly, aware datetimes are converted (floor to the ms)."""

from __future__ import annotations

import datetime as dt
import enum
import math

import numpy as np
import pandas as pd
import pytest

from keyedstate.errors import InvalidTimestampError
from keyedstate.state.heap import HeapKeyedStateBackend
from timers import MAX_TIMESTAMP, InternalTimerService, TimerService, to_epoch_millis, to_time_bound

UTC = dt.timezone.utc


class Priority(enum.IntEnum):
    LATE = 42


@pytest.mark.parametrize(
    "value, millis",
    [
        (0, 0),
        (1_700_000_000_123, 1_700_000_000_123),
        (MAX_TIMESTAMP, MAX_TIMESTAMP),
        (np.int64(1234), 1234),
        (np.int32(5), 5),
        (np.uint64(7), 7),
        (Priority.LATE, 42),
        (dt.datetime(1970, 1, 1, tzinfo=UTC), 0),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC), 1_704_164_645_678),
        # another zone: the same instant
        (dt.datetime(2024, 1, 2, 5, 4, 5, 678_000, tzinfo=dt.timezone(dt.timedelta(hours=2))), 1_704_164_645_678),
        # sub-millisecond parts are floored, so a timer never fires before its datetime
        (dt.datetime(2024, 1, 2, 3, 4, 5, 678_999, tzinfo=UTC), 1_704_164_645_678),
        (pd.Timestamp("2024-01-02T03:04:05.678Z"), 1_704_164_645_678),
    ],
)
def test_accepted_timestamps(value, millis):
    converted = to_epoch_millis(value)
    assert converted == millis and type(converted) is int


@pytest.mark.parametrize(
    "value, message",
    [
        (-1, "negative"),
        (MAX_TIMESTAMP + 1, "Long.MAX_VALUE"),
        (float("nan"), "NaN"),
        (np.float64("nan"), "NaN"),
        (1.5, "float"),
        (5.0, "float"),
        (True, "bool"),
        (np.bool_(True), "bool"),
        (None, "NoneType"),
        ("1700000000000", "str"),
        (dt.datetime(2024, 1, 2, 3, 4, 5), "naive datetime"),
        (pd.Timestamp("2024-01-02T03:04:05"), "naive datetime"),
        (dt.date(2024, 1, 2), "date"),
        (dt.datetime(1969, 12, 31, 23, 59, tzinfo=UTC), "negative"),
        (np.int64(-3), "negative"),
        (math.inf, "float"),
    ],
)
def test_rejected_timestamps_raise_a_clear_error(value, message):
    with pytest.raises(InvalidTimestampError, match=message):
        to_epoch_millis(value)


def test_invalid_timestamp_error_is_a_value_error():
    with pytest.raises(ValueError):
        to_epoch_millis(-5)


def test_watermarks_and_processing_times_may_be_negative_but_not_bad():
    assert to_time_bound(-(2**63), "watermark") == -(2**63)
    assert to_time_bound(dt.datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC), "watermark") == -1
    for bad in (2**63, -(2**63) - 1, float("nan"), dt.datetime(2024, 1, 1), True):
        with pytest.raises(InvalidTimestampError):
            to_time_bound(bad, "watermark")


def _service():
    backend = HeapKeyedStateBackend()
    backend.set_current_key("k")
    fired = []

    class Recorder:
        def on_event_time(self, timer):
            fired.append(("event", timer.timestamp))

        def on_processing_time(self, timer):
            fired.append(("processing", timer.timestamp))

    return InternalTimerService(backend, Recorder()), fired


@pytest.mark.parametrize(
    "method",
    [
        "register_event_time_timer",
        "register_processing_time_timer",
        "delete_event_time_timer",
        "delete_processing_time_timer",
    ],
)
@pytest.mark.parametrize("bad", [-1, 1.0, float("nan"), False, dt.datetime(2024, 1, 1), "10"])
def test_the_timer_service_rejects_bad_timestamps_and_registers_nothing(method, bad):
    service, _ = _service()
    with pytest.raises(InvalidTimestampError):
        getattr(TimerService(service), method)(bad)
    assert service.num_event_time_timers() == 0 and service.num_processing_time_timers() == 0


def test_aware_datetimes_register_the_same_timer_as_their_epoch_millis():
    service, fired = _service()
    facade = TimerService(service)
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    facade.register_event_time_timer(when)
    facade.register_event_time_timer(1_704_164_645_678)  # the same timer
    facade.register_processing_time_timer(np.int64(1_704_164_645_678))
    assert service.num_event_time_timers() == 1
    service.advance_watermark(when)
    service.advance_processing_time(pd.Timestamp(when))
    assert fired == [("event", 1_704_164_645_678), ("processing", 1_704_164_645_678)]
    assert service.current_watermark() == 1_704_164_645_678


def test_advancing_to_a_bad_time_raises_and_changes_nothing():
    service, fired = _service()
    service.advance_watermark(10)
    for bad in (float("nan"), dt.datetime(2024, 1, 1), None):
        with pytest.raises(InvalidTimestampError):
            service.advance_watermark(bad)
        with pytest.raises(InvalidTimestampError):
            service.advance_processing_time(bad)
    assert service.current_watermark() == 10
