"""``keyed_process``: run a ``KeyedProcessFunction`` on a streaming DataFrame, Flink-style.

Spark groups are key groups, not user keys: the key group ``pmod(xxhash64(key columns), num_key_groups)`` is
computed, the stream is grouped by a column that stands for it (see :mod:`keyedstate.spark.key_group_layout` for why
it is not the number itself), and keyedstate runs every key of a group (its state, its timers) inside one
``applyInPandasWithState`` call. Grouping by the user key instead (``num_key_groups=None``) costs Spark about 1 ms
per key and batch, which caps a 2-core machine near 2,000 keys/s.
"""

from __future__ import annotations

import uuid
from typing import Any, Optional, Sequence, Union

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructType, TimestampNTZType, TimestampType

from keyedstate.api.co_process_function import KeyedCoProcessFunction
from keyedstate.api.process_function import KeyedProcessFunction
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import DEFAULT_NUM_KEY_GROUPS, validate_num_key_groups
from keyedstate.spark.group_function import make_group_function
from keyedstate.spark.group_spec import GroupFunctionSpec
from keyedstate.spark.key_group_layout import BALANCED, grouping_value_column
from keyedstate.spark.metrics import METRICS_SCHEMA_DDL, METRICS_TAG, metrics_name, metrics_struct, observe_metrics
from keyedstate.spark.options import EVENT_TIME, KeyedProcessOptions
from keyedstate.spark.output_frames import SIDE_OUTPUT_TAG_COLUMN, OutputLayout, side_output_column
from keyedstate.spark.schemas import check_key_columns, column_types, parse_schema
from keyedstate.spark.shipping import ShippedFunction
from keyedstate.spark.state_backend_options import default_uid, resolve_state_backend, retained_batches
from keyedstate.spark.timestamps import send_timestamps_as_micros
from keyedstate.spark.watermarks import check_watermark, keep_late_events
from keyedstate.spark_compat import GROUP_STATE_TIMEOUT, check_arrow, shuffle_partitions
from keyedstate.state.key_groups.initial_state import resolve_initial_state
from keyedstate.state.key_groups.row_format import STATE_ROW_SCHEMA_DDL

__all__ = ["METRICS_TAG", "METRICS_SCHEMA_DDL", "KEY_GROUP_COLUMN", "EVENT_TIME_MS_COLUMN", "KeyedProcessOptions",
           "keyed_process", "keyed_process_metrics_name", "add_key_group_column", "apply_in_pandas_with_state_args",
           "main_output", "side_output"]

INTERNAL_COLUMN_PREFIX = "_keyedstate_"
KEY_GROUP_COLUMN = INTERNAL_COLUMN_PREFIX + "key_group"
EVENT_TIME_MS_COLUMN = INTERNAL_COLUMN_PREFIX + "event_time_ms"


def add_key_group_column(
    df: DataFrame, key_columns: Sequence[str], num_key_groups: int = DEFAULT_NUM_KEY_GROUPS,
    column_name: str = KEY_GROUP_COLUMN, key_group_layout: str = BALANCED,
) -> DataFrame:
    """Add the column keyed_process groups by. The key group is a stable Spark hash of the key columns modulo
    ``num_key_groups``; the column holds that number (``key_group_layout="identity"``, an int) or, by default, the
    bigint that makes Spark spread the key groups evenly over the shuffle partitions (``"balanced"``)."""
    check_key_columns(df, key_columns)
    validate_num_key_groups(num_key_groups)
    hashed = F.xxhash64(*[F.col(c) for c in key_columns])
    key_group = F.pmod(hashed, F.lit(num_key_groups))
    return df.withColumn(column_name, grouping_value_column(key_group, num_key_groups, key_group_layout))


def event_time_millis(df: DataFrame, column: str, what: str) -> Column:
    """``column`` of ``df`` (a timestamp, or a bigint of epoch milliseconds) as epoch milliseconds; ``what`` names
    the argument in errors."""
    types = column_types(df)
    if column not in types or column.startswith(INTERNAL_COLUMN_PREFIX):
        columns = ", ".join(c for c in df.columns if not c.startswith(INTERNAL_COLUMN_PREFIX))
        raise ConfigurationError(f"{what} {column!r} is not in the DataFrame (columns: {columns})")
    column_type = types[column]
    if isinstance(column_type, (TimestampType, TimestampNTZType)):
        return F.unix_millis(F.col(column).cast(TimestampType()))
    if isinstance(column_type, LongType):
        return F.col(column)
    raise ConfigurationError(
        f"{what} {column!r} has type {column_type.simpleString()}; it must be a timestamp (or a bigint of epoch "
        f"milliseconds). Convert it with to_timestamp(...) first"
    )


def _prepare(
    df: DataFrame, key_columns: Sequence[str], event_time_column: Optional[str], options: KeyedProcessOptions,
) -> tuple[DataFrame, list[str], str, Optional[str], tuple[str, ...]]:
    """Add the internal columns; returns (frame, value columns, grouping column, event-time-ms column, the value
    columns sent as microseconds (:mod:`keyedstate.spark.timestamps`))."""
    check_key_columns(df, key_columns)
    value_columns = list(df.columns)
    if not options.drop_late_events:
        df = keep_late_events(df)
    time_ms_column = None
    if event_time_column is not None:
        millis = event_time_millis(df, event_time_column, "event_time_column")
        if options.time_mode == EVENT_TIME:
            check_watermark(df, event_time_column, "the input stream (before keyed_process)")
        df = df.withColumn(EVENT_TIME_MS_COLUMN, millis)
        time_ms_column = EVENT_TIME_MS_COLUMN
    elif options.time_mode == EVENT_TIME:
        raise ConfigurationError(
            "time_mode='event_time' needs event_time_column (a timestamp column with a watermark: "
            "df.withWatermark(column, '10 seconds')); use time_mode='processing_time' for streams without event time"
        )
    prepared, grouping_column = with_grouping_column(df, key_columns, options)
    # after the key groups: they hash the keys' Spark values, as bootstrap_keyed_state does. Without key groups Spark
    # groups by the key columns themselves: their type is in the checkpoint's state schema
    sent = value_columns if options.num_key_groups is not None else [c for c in value_columns if c not in key_columns]
    prepared, micros = send_timestamps_as_micros(prepared, sent, key_columns, "keyed_process")
    return prepared, value_columns, grouping_column, time_ms_column, micros


def with_grouping_column(df: DataFrame, key_columns: Sequence[str],
                         options: KeyedProcessOptions) -> tuple[DataFrame, str]:
    """``df`` with its key-group column, and the column's name; without key groups (``num_key_groups=None``) ``df``
    and the one key column Spark groups by (several key columns: :data:`KEY_GROUP_COLUMN`, which names none)."""
    if options.num_key_groups is None:
        return df, key_columns[0] if len(key_columns) == 1 else KEY_GROUP_COLUMN
    layout = options.key_group_layout
    return add_key_group_column(df, key_columns, options.num_key_groups, key_group_layout=layout), KEY_GROUP_COLUMN


def apply_in_pandas_with_state_args(
    df: DataFrame, key_columns: Sequence[str], function: KeyedProcessFunction, output_schema: Union[StructType, str],
    *, event_time_column: Optional[str] = None, side_outputs: Optional[dict[str, Union[StructType, str]]] = None,
    options: Optional[KeyedProcessOptions] = None, **settings: Any,
) -> tuple[DataFrame, list[str], tuple[Any, StructType, str, str, str]]:
    """For users who call Spark themselves: the prepared frame, the grouping columns, and the arguments of
    ``prepared.groupBy(*grouping).applyInPandasWithState(*args)`` (function, output struct, state struct (DDL),
    output mode, timeout conf). The arguments are :func:`keyed_process`'s, but ``progress_metrics`` is always off:
    the caller observes the output itself."""
    resolved = KeyedProcessOptions.of("apply_in_pandas_with_state_args", options, settings, progress_metrics=False)
    return _group_call_of(df, key_columns, function, output_schema, event_time_column, side_outputs, resolved)


def _group_call_of(
    df: DataFrame, key_columns: Sequence[str], function: KeyedProcessFunction, output_schema: Union[StructType, str],
    event_time_column: Optional[str], side_outputs: Optional[dict[str, Union[StructType, str]]],
    options: KeyedProcessOptions,
) -> tuple[DataFrame, list[str], tuple[Any, StructType, str, str, str]]:
    check_arrow()
    if not isinstance(function, KeyedProcessFunction):
        raise ConfigurationError(
            f"function must be a KeyedProcessFunction instance, got {type(function).__qualname__}"
            + ("; a KeyedCoProcessFunction runs with keyed_co_process" if isinstance(function, KeyedCoProcessFunction)
               else "")
        )
    layout = output_layout(output_schema, side_outputs, options)
    prepared, value_columns, grouping_column, time_ms_column, micros_columns = _prepare(
        df, key_columns, event_time_column, options)
    return group_call(
        df, prepared, function, layout, options, key_columns=key_columns, value_columns=value_columns,
        micros_columns=micros_columns, grouping_column=grouping_column, time_ms_column=time_ms_column,
    )


def output_layout(output_schema: Union[StructType, str], side_outputs: Optional[dict[str, Union[StructType, str]]],
                  options: KeyedProcessOptions) -> OutputLayout:
    """The output layout: the main output, the side outputs, and the metrics side output when calls emit metric
    rows (:attr:`KeyedProcessOptions.metric_rows`)."""
    main_schema = parse_schema(output_schema, "output_schema")
    sides = {tag: parse_schema(schema, f"side output {tag!r} schema") for tag, schema in (side_outputs or {}).items()}
    if options.metric_rows:
        if METRICS_TAG in sides:
            raise ConfigurationError(f"the side output name {METRICS_TAG!r} is reserved for emit_metrics")
        sides[METRICS_TAG] = parse_schema(METRICS_SCHEMA_DDL, "metrics schema")
    return OutputLayout(main_schema, sides)


def group_call(
    df: DataFrame, prepared: DataFrame, function: Any, layout: OutputLayout, options: KeyedProcessOptions, *,
    key_columns: Sequence[str], value_columns: Sequence[str], grouping_column: str, time_ms_column: Optional[str],
    inputs: Any = None, micros_columns: Sequence[str] = (),
) -> tuple[DataFrame, list[str], tuple[Any, StructType, str, str, str]]:
    """The prepared frame, grouping columns and ``applyInPandasWithState`` arguments for ``prepared`` (the input
    ``df`` with keyedstate's internal columns); ``inputs`` describes a two-input frame (see
    :mod:`keyedstate.spark.co_process`)."""
    grouping = list(key_columns) if options.num_key_groups is None else [grouping_column]
    conf = df.sparkSession.conf
    options = resolve_state_backend(options, conf, function)
    types = column_types(df)
    key_types = tuple(types[c].simpleString() for c in key_columns)
    initial = None
    if options.initial_state is not None:
        initial = resolve_initial_state(
            options.initial_state, state_backend=options.state_backend, num_key_groups=options.num_key_groups,
            key_types=list(key_types), storage_options=options.storage_options,
            call="keyed_process" if inputs is None else "keyed_co_process")
    spec = GroupFunctionSpec(
        runtime_id=uuid.uuid4().hex,
        key_columns=tuple(key_columns),
        value_columns=tuple(value_columns),
        key_group_column=grouping_column,
        event_time_ms_column=time_ms_column,
        layout=layout,
        options=options,
        parallelism=shuffle_partitions(df),
        retain_batches=retained_batches(conf),
        inputs=inputs,
        initial_state=initial,
        micros_columns=tuple(micros_columns),
        key_types=key_types,
    )
    timeout = (GROUP_STATE_TIMEOUT.EventTimeTimeout if options.time_mode == EVENT_TIME
               else GROUP_STATE_TIMEOUT.ProcessingTimeTimeout)
    shipped = ShippedFunction(function)
    shipped.check()  # an attribute that cannot be pickled is named now, not in Spark's stack trace at start()
    args = (make_group_function(spec, shipped), layout.output_schema, STATE_ROW_SCHEMA_DDL, "append", timeout)
    return prepared, grouping, args


def keyed_process(
    df: DataFrame,
    key_columns: Sequence[str],
    function: KeyedProcessFunction,
    output_schema: Union[StructType, str],
    *,
    event_time_column: Optional[str] = None,
    side_outputs: Optional[dict[str, Union[StructType, str]]] = None,
    options: Optional[KeyedProcessOptions] = None,
    **settings: Any,
) -> DataFrame:
    """Run ``function`` over ``df`` keyed by ``key_columns``; returns the output stream (append mode).

    * ``process_element(value, ctx)`` gets each input row as a ``pyspark.sql.Row`` of ``df``'s columns
      (``value.user``, ``value["user"]``, ``value[0]``, ``asDict()``; timestamp columns hold ``datetime.datetime``
      as in ``collect()``'s Rows, in the session time zone, for every year Spark allows, 9999 included);
      ``ctx.get_current_key()`` is the key column's value (a tuple for several key
      columns). A call processes its keys one after another, each key's elements in event-time order.
    * ``event_time_column`` (timestamp) gives ``ctx.timestamp()``; ``time_mode="event_time"`` (the default)
      requires it, with ``df.withWatermark(...)`` upstream.
    * ``side_outputs={"late": "user STRING, ts BIGINT"}`` declares side outputs; the output then has an
      ``output_tag`` column and one struct column per side output: use :func:`main_output` / :func:`side_output`.
    * The metrics ``progress_metrics`` puts into the query's progress are under
      :func:`keyed_process_metrics_name`'s key; ``emit_metrics`` keeps their rows as the side output
      ``keyedstate_metrics`` (:data:`METRICS_SCHEMA_DDL`).
    * ``options``: see :class:`KeyedProcessOptions`, whose every field is also a keyword argument here
      (``num_key_groups=8, state_backend="rocksdb"``) that replaces that field of ``options``.
    """
    options = KeyedProcessOptions.of("keyed_process", options, settings)
    prepared, grouping, args = _group_call_of(df, key_columns, function, output_schema, event_time_column,
                                              side_outputs, options)
    output = prepared.groupBy(*grouping).applyInPandasWithState(*args)
    return with_progress_metrics(output, function, options, output_schema, side_outputs)


def keyed_process_metrics_name(function: Any, uid: Optional[str] = None) -> str:
    """The key of a keyed_process's (or keyed_co_process's) metrics in ``lastProgress["observedMetrics"]``:
    ``"keyedstate.<uid>"``, with the ``uid`` given to it, or the default uid of ``function``'s class."""
    return metrics_name(uid if uid is not None else default_uid(type(function).__qualname__))


def with_progress_metrics(output: DataFrame, function: Any, options: KeyedProcessOptions,
                          output_schema: Union[StructType, str], side_outputs: Optional[dict[str, Any]]) -> DataFrame:
    """``output`` with its metric rows observed into the query's progress (``options.progress_metrics``), and
    without them unless ``options.emit_metrics`` keeps them (as the :data:`METRICS_SCHEMA_DDL` struct)."""
    metrics_column = side_output_column(METRICS_TAG)
    if not options.progress_metrics:
        if options.emit_metrics:
            return output.withColumn(metrics_column, metrics_struct(metrics_column))
        return output
    if side_outputs:
        keep = [c for c in output.columns if c != metrics_column]
    else:
        keep = [f.name for f in parse_schema(output_schema, "output_schema").fields]
    return observe_metrics(output, metrics_column, SIDE_OUTPUT_TAG_COLUMN,
                           keyed_process_metrics_name(function, options.uid), keep, keep_rows=options.emit_metrics)


def main_output(output: DataFrame, output_schema: Union[StructType, str]) -> DataFrame:
    """The main-output rows of a keyed_process stream that declared side outputs."""
    names = [f.name for f in parse_schema(output_schema, "output_schema").fields]
    return output.where(F.col(SIDE_OUTPUT_TAG_COLUMN).isNull()).select(*names)


def side_output(output: DataFrame, tag_id: str) -> DataFrame:
    """The rows sent to side output ``tag_id``, with that side output's columns."""
    column = side_output_column(tag_id)
    if column not in output.columns:
        raise ConfigurationError(f"side output {tag_id!r} was not declared in keyed_process(side_outputs=...)")
    rows = output.where(F.col(SIDE_OUTPUT_TAG_COLUMN) == tag_id)
    if tag_id == METRICS_TAG and isinstance(output.schema[column].dataType, StringType):
        # as the metrics rows left the workers: applyInPandasWithState's output without keyed_process's projection
        return rows.select(metrics_struct(column).alias(column)).select(f"{column}.*")
    return rows.select(f"{column}.*")
