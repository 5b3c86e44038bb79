"""keyed_process's metrics: one row per key-group call, summed per micro-batch into the query's progress.

Every key-group call (:mod:`keyedstate.spark.group_function`) measures what it did and emits one row of
:data:`METRICS_SCHEMA_DDL` to the reserved side output :data:`METRICS_TAG`. ``keyed_process`` aggregates those rows
with Spark's ``DataFrame.observe`` (:func:`observe_metrics`), which puts one set of numbers per micro-batch into
``query.lastProgress["observedMetrics"][metrics_name(uid)]``, where ``StreamingQueryListener.onQueryProgress`` and
Spark Connect clients see them, and then filters the rows out of the stream (unless ``emit_metrics=True`` asked to
keep them). Observed metrics work the same on Spark 3.5 to 4.3 and through Spark Connect; nothing here needs a
listener or an accumulator. Each metric is documented once, in docs/operations.md ("Monitoring").

Between the Python workers and Spark a metrics row travels as one string column (its values joined by commas, an
empty part for null), rebuilt into the :data:`METRICS_SCHEMA_DDL` struct on the Spark side (:func:`metrics_struct`).
Every output row carries that column, null but for the metrics rows, and PySpark converts a struct column from
pandas value by value: at 500,000 outputs a batch that cost about 0.13 s, a string column nothing measurable.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "METRICS_TAG",
    "METRICS_SCHEMA_DDL",
    "METRICS_NAME_PREFIX",
    "PROGRESS_METRICS",
    "CallMetrics",
    "encode_metrics_row",
    "metrics_name",
    "metrics_struct",
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

METRICS_FIELDS: tuple[tuple[str, str], ...] = tuple(
    (field.split()[0], field.split()[1]) for field in METRICS_SCHEMA_DDL.split(", "))
"""(name, Spark SQL type) of each field of a metrics row, in order."""

NULLABLE_METRICS_FIELDS = frozenset({"watermark", "timer_lag_ms"})
"""The fields a metrics row may leave null (an empty part in its encoding); the others always hold a number."""

METRICS_NAME_PREFIX = "keyedstate."
"""Observed metrics are named ``keyedstate.<uid>`` (one name per keyed_process of a query)."""


def metrics_name(uid: str) -> str:
    """The key of a keyed_process's metrics in ``lastProgress["observedMetrics"]``."""
    return METRICS_NAME_PREFIX + uid


# (progress name, how the calls' values of a metrics field are summarised, the field); the names follow
# transformWithState's customMetrics and Flink's operator metrics where those have one.
PROGRESS_METRICS: tuple[tuple[str, str, str], ...] = (
    ("numRecordsIn", "sum", "elements"),
    ("numRecordsOut", "sum", "outputs"),
    ("numLateRecords", "sum", "late_elements"),
    ("currentWatermark", "max", "watermark"),
    ("numRegisteredTimers", "sum", "timers_registered"),
    ("numDeletedTimers", "sum", "timers_deleted"),
    ("numExpiredTimers", "sum", "timers_fired"),
    ("numPendingTimers", "sum", "pending_timers"),
    ("processingTimeTimerLagMs", "max", "timer_lag_ms"),
    ("numKeysWithState", "sum", "keys_with_state"),
    ("stateSizeBytes", "sum", "state_bytes"),
    ("stateBytesWritten", "sum", "bytes_written"),
    ("stateBaseBytesWritten", "sum", "base_bytes_written"),
    ("stateRestoreTimeMs", "millis", "restore_us"),
    ("numKeyGroups", "count", "key_group"),
    ("maxRecordsPerKeyGroup", "max_or_zero", "elements"),
    # only the key groups that received elements: a call for a due timer alone says nothing about skew
    ("medianRecordsPerKeyGroup", "median_of_positive", "elements"),
    ("userFunctionTimeMs", "millis", "user_function_us"),
    ("keyedStateTimeMs", "millis", "keyedstate_us"),
    ("timerProcessingTimeMs", "millis", "timer_us"),
)
"""What ``lastProgress["observedMetrics"][metrics_name(uid)]`` holds, in this order."""


def _summary_sql(kind: str, field: str, metrics_column: str) -> str:
    """The SQL aggregate summarising field ``field`` of the batch's metrics rows (encoded in ``metrics_column``) as
    ``kind``.

    Written as SQL, one plain aggregate per metric: a streaming query plans its observation again in every
    micro-batch, and higher-order functions or a Column built in a few hundred Py4J calls made that cost a third of
    a second per query start (bench/test_progress_metrics_bench.py). Each aggregate splits the encoded row itself,
    which costs nothing on the output rows (their column is null) and spares every output row a projection."""
    value = _field_sql(f"split(`{metrics_column}`, ',')", field)
    if kind == "sum":
        return f"coalesce(sum({value}), 0L)"  # a batch without calls reports 0, not null
    if kind == "millis":
        return f"coalesce(CAST(round(sum({value}) / 1000) AS BIGINT), 0L)"
    if kind == "max":
        return f"max({value})"
    if kind == "max_or_zero":
        return f"coalesce(max({value}), 0L)"
    if kind == "count":
        return f"count({value})"
    assert kind == "median_of_positive", kind
    return f"coalesce(CAST(percentile_approx(nullif({value}, 0), 0.5) AS BIGINT), 0L)"


def encode_metrics_row(values: tuple[Any, ...]) -> str:
    """A metrics row as it travels from a worker to Spark (:func:`metrics_struct` reads it back)."""
    return ",".join("" if value is None else str(value) for value in values)


def _field_sql(parts: str, field: str) -> str:
    """SQL of field ``field`` of the split metrics rows ``parts`` (an array of strings; null in other rows)."""
    index = next(i for i, (name, _) in enumerate(METRICS_FIELDS) if name == field)
    cast = f"CAST({parts}[{index}] AS {METRICS_FIELDS[index][1]})"
    # '' is a null; only the nullable fields pay the check (a plain cast of '' fails under ANSI mode, Spark 4's default)
    return f"CASE WHEN {parts}[{index}] != '' THEN {cast} END" if field in NULLABLE_METRICS_FIELDS else cast


def metrics_struct(column: str) -> Any:
    """The :data:`METRICS_SCHEMA_DDL` struct of the encoded metrics rows in column ``column`` (null in other rows)."""
    from pyspark.sql import functions as F

    parts = f"split(`{column}`, ',')"
    fields = ", ".join(f"'{name}', {_field_sql(parts, name)}" for name, _ in METRICS_FIELDS)
    return F.expr(f"CASE WHEN `{column}` IS NOT NULL THEN named_struct({fields}) END")


def observe_metrics(output: Any, metrics_column: str, tag_column: str, name: str, keep_columns: list[str],
                    keep_rows: bool) -> Any:
    """``output`` (a keyed_process stream whose calls emit metric rows) with the metrics observed under ``name``.

    ``keep_rows`` (``emit_metrics=True``): the stream is returned with its metric rows, their column as the
    :data:`METRICS_SCHEMA_DDL` struct. Otherwise they are filtered out and the stream is reduced to
    ``keep_columns``: what it would have without metrics."""
    from pyspark.sql import functions as F

    observed = output.observe(name, *[F.expr(_summary_sql(kind, field, metrics_column)).alias(metric)
                                      for metric, kind, field in PROGRESS_METRICS])
    if keep_rows:
        return observed.withColumn(metrics_column, metrics_struct(metrics_column))
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
            state_bytes: int, bytes_written: int, base_bytes_written: int, call_s: float) -> str:
        """The row of :data:`METRICS_SCHEMA_DDL`, encoded (:func:`encode_metrics_row`); ``call_s``: the whole call's
        seconds."""
        user_s = self.process_s + self.timer_s
        return encode_metrics_row((
            key_group, elements, self.late_elements, outputs, watermark, timers_fired, timers_registered,
            timers_deleted, pending_timers, self.timer_lag_ms, keys_with_state, state_bytes, bytes_written,
            base_bytes_written, _micros(self.restore_s), _micros(user_s), _micros(max(call_s - user_s, 0.0)),
            _micros(self.timer_s)))


def _micros(seconds: float) -> int:
    return int(seconds * 1_000_000)
