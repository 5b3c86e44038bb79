"""State time-to-live configuration in Flink's builder shape.

``StateTtlConfig.new_builder(Time.minutes(10)).set_update_type(...).set_state_visibility(...).build()``.
An entry is expired iff ``last_access + ttl <= now``; time is processing time in epoch milliseconds, read from the
backend's TTL clock (the harness's processing time, or the micro-batch timestamp on Spark).
"""

from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass, replace
from typing import Any, Union

from keyedstate.errors import ConfigurationError

__all__ = ["Time", "StateTtlConfig", "duration_to_millis"]


class Time:
    """PyFlink's ``Time`` factory: durations in milliseconds."""

    def __init__(self, milliseconds: int) -> None:
        self._milliseconds = duration_to_millis(milliseconds)

    def to_milliseconds(self) -> int:
        return self._milliseconds

    @staticmethod
    def milliseconds(n: int) -> "Time":
        return Time(n)

    @staticmethod
    def seconds(n: float) -> "Time":
        return Time(round(n * 1000))

    @staticmethod
    def minutes(n: float) -> "Time":
        return Time(round(n * 60_000))

    @staticmethod
    def hours(n: float) -> "Time":
        return Time(round(n * 3_600_000))

    @staticmethod
    def days(n: float) -> "Time":
        return Time(round(n * 86_400_000))

    def __repr__(self) -> str:
        return f"Time({self._milliseconds} ms)"


Duration = Union[Time, _dt.timedelta, int]


def duration_to_millis(value: Duration) -> int:
    """A duration as whole milliseconds; accepts ``Time``, ``timedelta`` or an int of milliseconds."""
    if isinstance(value, Time):
        return value.to_milliseconds()
    if isinstance(value, _dt.timedelta):
        millis = value // _dt.timedelta(milliseconds=1)
    elif isinstance(value, int) and not isinstance(value, bool):
        millis = value
    else:
        raise ConfigurationError(
            f"a duration must be a keyedstate.Time, a datetime.timedelta or an int of milliseconds, got "
            f"{type(value).__qualname__}"
        )
    if millis <= 0:
        raise ConfigurationError(f"a TTL or duration must be positive, got {millis} ms")
    return millis


@dataclass(frozen=True)
class StateTtlConfig:
    """How long state lives after its last write (or read) and when expired entries are removed."""

    class UpdateType(enum.Enum):
        """When the last-access timestamp is refreshed."""

        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class StateVisibility(enum.Enum):
        """Whether an expired entry that is still stored may be returned."""

        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(enum.Enum):
        ProcessingTime = 0

    ttl_millis: int
    update_type: "StateTtlConfig.UpdateType" = UpdateType.OnCreateAndWrite
    state_visibility: "StateTtlConfig.StateVisibility" = StateVisibility.NeverReturnExpired
    cleanup_in_background: bool = True
    cleanup_full_snapshot: bool = False
    incremental_cleanup_size: int = 5
    run_cleanup_for_every_record: bool = False

    @staticmethod
    def new_builder(ttl: Duration) -> "StateTtlConfig.Builder":
        return StateTtlConfig.Builder(ttl)

    @property
    def update_on_read(self) -> bool:
        return self.update_type is StateTtlConfig.UpdateType.OnReadAndWrite

    @property
    def return_expired(self) -> bool:
        return self.state_visibility is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp

    def get_ttl(self) -> Time:
        return Time(self.ttl_millis)

    def get_update_type(self) -> "StateTtlConfig.UpdateType":
        return self.update_type

    def get_state_visibility(self) -> "StateTtlConfig.StateVisibility":
        return self.state_visibility

    def is_enabled(self) -> bool:
        return self.update_type is not StateTtlConfig.UpdateType.Disabled

    def describe(self) -> str:
        return f"ttl={self.ttl_millis}ms,update={self.update_type.name},visibility={self.state_visibility.name}"

    class Builder:
        """Flink-shaped builder; every setter returns the builder."""

        def __init__(self, ttl: Duration) -> None:
            self._config = StateTtlConfig(duration_to_millis(ttl))

        def set_update_type(self, update_type: "StateTtlConfig.UpdateType") -> "StateTtlConfig.Builder":
            if not isinstance(update_type, StateTtlConfig.UpdateType):
                raise ConfigurationError(f"update type must be a StateTtlConfig.UpdateType, got {update_type!r}")
            return self._replaced(update_type=update_type)

        def update_ttl_on_create_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, visibility: "StateTtlConfig.StateVisibility") -> "StateTtlConfig.Builder":
            if not isinstance(visibility, StateTtlConfig.StateVisibility):
                raise ConfigurationError(f"visibility must be a StateTtlConfig.StateVisibility, got {visibility!r}")
            return self._replaced(state_visibility=visibility)

        def return_expired_if_not_cleaned_up(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl(self, ttl: Duration) -> "StateTtlConfig.Builder":
            return self._replaced(ttl_millis=duration_to_millis(ttl))

        def set_ttl_time_characteristic(
                self, characteristic: "StateTtlConfig.TtlTimeCharacteristic") -> "StateTtlConfig.Builder":
            if characteristic is not StateTtlConfig.TtlTimeCharacteristic.ProcessingTime:
                raise ConfigurationError("only processing-time TTL is supported (as in Flink)")
            return self

        def cleanup_full_snapshot(self) -> "StateTtlConfig.Builder":
            """Expired entries are left out of (and removed during) every snapshot."""
            return self._replaced(cleanup_full_snapshot=True)

        def cleanup_incrementally(self, cleanup_size: int,
                                  run_cleanup_for_every_record: bool) -> "StateTtlConfig.Builder":
            """Heap backend: check ``cleanup_size`` more entries on state access (and on every record if asked)."""
            if cleanup_size < 0:
                raise ConfigurationError(f"cleanup_size must be >= 0, got {cleanup_size}")
            return self._replaced(incremental_cleanup_size=cleanup_size,
                                  run_cleanup_for_every_record=run_cleanup_for_every_record)

        def cleanup_in_rocksdb_compact_filter(
                self, query_time_after_num_entries: int = 1000) -> "StateTtlConfig.Builder":
            """RocksDB backend: expired entries are purged by the background cleanup pass at snapshot time."""
            return self._replaced(cleanup_in_background=True)

        def disable_cleanup_in_background(self) -> "StateTtlConfig.Builder":
            return self._replaced(cleanup_in_background=False)

        def build(self) -> "StateTtlConfig":
            return self._config

        def _replaced(self, **changes: Any) -> "StateTtlConfig.Builder":
            self._config = replace(self._config, **changes)
            return self
