"""keyed_process's metrics: one row per key-group call, summed per micro-batch into the query's progress.

Every key-group call (:mod:`keyedstate.spark.group_function`) measures what it did and emits one row of
:data:`METRICS_SCHEMA_DDL` to the reserved side output :data:`METRICS_TAG`. ``keyed_process`` aggregates those rows
with Spark's ``DataFrame.observe`` (:func:`observe_metrics`), which puts one set of numbers per micro-batch into
``query.lastProgress["observedMetrics"][metrics_name(uid)]``, where ``StreamingQueryListener.onQueryProgress`` and
Spark Connect clients see them, and then filters the rows out of the stream (unless ``emit_metrics=True`` asked to
keep them). Observed metrics work the same on Spark 3.5 to 4.3 and through Spark Connect; nothing here needs a
listener or an accumulator. Each metric is documented once, in docs/operations.md ("Monitoring").
"""

from __future__ import annotations

from typing import Any, Callable, Optional

__all__ = [
    "METRICS_TAG",
    "METRICS_SCHEMA_DDL",
    "METRICS_NAME_PREFIX",
    "PROGRESS_METRICS",
    "CallMetrics",
    "metrics_name",
    "observe_metrics",
]

METRICS_TAG = "keyedstate_metrics"
"""The side output that carries the per-call rows (``side_output(stream, METRICS_TAG)`` with ``emit_metrics``)."""

METRICS_SCHEMA_DDL = (
    "key_group INT, elements BIGINT, late_elements BIGINT, outputs BIGINT, watermark BIGINT, timers_fired BIGINT, "
    "timers_registered BIGINT, timers_deleted BIGINT, pending_timers BIGINT, timer_lag_ms BIGINT, "
    "keys_with_state BIGINT, state_bytes BIGINT, bytes_written BIGINT, base_bytes_written BIGINT, "
    "restore_us BIGINT, user_function_us BIGINT, keyedstate_us BIGINT, timer_us BIGINT"
)
"""One row per key-group call: its key group, what it processed and emitted, its timers, its state after the call
and the time it took (microseconds). docs/operations.md, "Monitoring", says what each column measures."""

METRICS_NAME_PREFIX = "keyedstate."
"""Observed metrics are named ``keyedstate.<uid>`` (one name per keyed_process of a query)."""


def metrics_name(uid: str) -> str:
    """The key of a keyed_process's metrics in ``lastProgress["observedMetrics"]``."""
    return METRICS_NAME_PREFIX + uid


# (progress name, aggregate of the metric rows' fields); the names follow transformWithState's customMetrics and
# Flink's operator metrics where those have one. ``field(name)`` is the rows' column ``name`` (null in other rows).
PROGRESS_METRICS: tuple[tuple[str, Callable[[Callable[[str], Any]], Any]], ...] = (
    ("numRecordsIn", lambda field: _sum(field("elements"))),
    ("numRecordsOut", lambda field: _sum(field("outputs"))),
    ("numLateRecords", lambda field: _sum(field("late_elements"))),
    ("currentWatermark", lambda field: _max(field("watermark"))),
    ("numRegisteredTimers", lambda field: _sum(field("timers_registered"))),
    ("numDeletedTimers", lambda field: _sum(field("timers_deleted"))),
    ("numExpiredTimers", lambda field: _sum(field("timers_fired"))),
    ("numPendingTimers", lambda field: _sum(field("pending_timers"))),
    ("processingTimeTimerLagMs", lambda field: _max(field("timer_lag_ms"))),
    ("numKeysWithState", lambda field: _sum(field("keys_with_state"))),
    ("stateSizeBytes", lambda field: _sum(field("state_bytes"))),
    ("stateBytesWritten", lambda field: _sum(field("bytes_written"))),
    ("stateBaseBytesWritten", lambda field: _sum(field("base_bytes_written"))),
    ("stateRestoreTimeMs", lambda field: _millis(field("restore_us"))),
    ("numKeyGroups", lambda field: _count(field("key_group"))),
    ("maxRecordsPerKeyGroup", lambda field: _sum_or_zero(_max(field("elements")))),
    ("medianRecordsPerKeyGroup", lambda field: _median(field("elements"))),
    ("userFunctionTimeMs", lambda field: _millis(field("user_function_us"))),
    ("keyedStateTimeMs", lambda field: _millis(field("keyedstate_us"))),
    ("timerProcessingTimeMs", lambda field: _millis(field("timer_us"))),
)
"""What ``lastProgress["observedMetrics"][metrics_name(uid)]`` holds, in this order."""


def _sum(column: Any) -> Any:
    from pyspark.sql import functions as F

    return _sum_or_zero(F.sum(column))


def _sum_or_zero(aggregate: Any) -> Any:
    from pyspark.sql import functions as F

    return F.coalesce(aggregate, F.lit(0)).cast("long")  # a batch without calls reports 0, not null


def _millis(column: Any) -> Any:
    from pyspark.sql import functions as F

    return _sum_or_zero(F.round(F.sum(column) / 1000))


def _max(column: Any) -> Any:
    from pyspark.sql import functions as F

    return F.max(column)


def _count(column: Any) -> Any:
    from pyspark.sql import functions as F

    return F.count(column)


def _median(column: Any) -> Any:
    from pyspark.sql import functions as F

    # only the key groups that received elements: a call for a due timer alone says nothing about skew
    return _sum_or_zero(F.percentile_approx(F.when(column > 0, column), F.lit(0.5)))


def observe_metrics(output: Any, metrics_column: str, tag_column: str, name: str, keep_columns: list[str],
                    keep_rows: bool) -> Any:
    """``output`` (a keyed_process stream whose calls emit metric rows) with the metrics observed under ``name``.

    ``keep_rows`` (``emit_metrics=True``): the stream is returned with its metric rows. Otherwise they are filtered
    out and the stream is reduced to ``keep_columns``: what it would have without metrics."""
    from pyspark.sql import functions as F

    def field(name: str) -> Any:
        return F.col(metrics_column).getField(name)

    observed = output.observe(name, *[aggregate(field).alias(metric) for metric, aggregate in PROGRESS_METRICS])
    if keep_rows:
        return observed
    tag = F.col(tag_column)
    return observed.where(tag.isNull() | (tag != F.lit(METRICS_TAG))).select(*keep_columns)


class CallMetrics:
    """What one key-group call measures, turned into its metrics row (worker side)."""

    __slots__ = ("late_elements", "timer_lag_ms", "restore_s", "process_s", "timer_s")

    def __init__(self) -> None:
        self.late_elements = 0
        self.timer_lag_ms: Optional[int] = None
        self.restore_s = 0.0
        self.process_s = 0.0  # in process_key_runs: the function's process_element with its state and timer calls
        self.timer_s = 0.0  # firing timers: on_timer with its calls, and the timer queues' work

    def row(self, key_group: int, *, elements: int, outputs: int, watermark: Optional[int], timers_fired: int,
            timers_registered: int, timers_deleted: int, pending_timers: int, keys_with_state: int,
            state_bytes: int, bytes_written: int, base_bytes_written: int, call_s: float) -> tuple[Any, ...]:
        """The row of :data:`METRICS_SCHEMA_DDL`; ``call_s``: the whole call's seconds."""
        user_s = self.process_s + self.timer_s
        return (key_group, elements, self.late_elements, outputs, watermark, timers_fired, timers_registered,
                timers_deleted, pending_timers, self.timer_lag_ms, keys_with_state, state_bytes, bytes_written,
                base_bytes_written, _micros(self.restore_s), _micros(user_s), _micros(max(call_s - user_s, 0.0)),
                _micros(self.timer_s))


def _micros(seconds: float) -> int:
    return int(seconds * 1_000_000)
