"""``keyed_co_process``: run a ``KeyedCoProcessFunction`` on two streaming DataFrames keyed the same way.

The two inputs become one stream that the same key-group machinery as ``keyed_process`` runs: each input is
projected to a common schema (the key columns, renamed to the first input's key column names; an input index; the
event time in milliseconds; both inputs' value columns, the other input's filled with placeholders; the column that
carries the watermark marker), the two are unioned, grouped by key group, and every element goes to
``process_element1`` or ``process_element2`` by its input index. Both inputs of a key share its state and timers.

The watermark is Spark's global watermark, by default (``spark.sql.streaming.multipleWatermarkPolicy=min``) the
minimum of both inputs' watermarks, as in Flink's two-input operators.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DataType, IntegralType, StructType, TimestampType

from keyedstate.api.co_process_function import KeyedCoProcessFunction
from keyedstate.errors import ConfigurationError
from keyedstate.spark.group_elements import ElementColumns, column_values, rows_builder
from keyedstate.spark.options import EVENT_TIME, KeyedProcessOptions
from keyedstate.spark.process import (
    EVENT_TIME_MS_COLUMN,
    INTERNAL_COLUMN_PREFIX,
    event_time_millis,
    group_call,
    output_layout,
    with_grouping_column,
    with_progress_metrics,
)
from keyedstate.spark.schemas import check_key_columns
from keyedstate.spark.timestamps import send_timestamps_as_micros
from keyedstate.spark.watermarks import (
    LATE_EVENTS_ANCHOR_COLUMN,
    check_watermark,
    late_events_anchor,
    unmarked_column,
    watermark_field,
    without_watermark,
)

__all__ = ["keyed_co_process", "TwoInputColumns", "INPUT_COLUMN"]

INPUT_COLUMN = INTERNAL_COLUMN_PREFIX + "input"
_WATERMARK_POLICY_CONF = "spark.sql.streaming.multipleWatermarkPolicy"

logger = logging.getLogger("keyedstate.spark.co_process")
_ORDINALS = ("first", "second")


@dataclass(frozen=True)
class TwoInputColumns:
    """Where each input's records are in the unioned frame: ``frame_columns[i]`` hold input ``i``'s values, which
    ``process_element{i + 1}`` receives as Rows with fields ``field_names[i]``."""

    input_column: str
    frame_columns: tuple[tuple[str, ...], tuple[str, ...]]
    field_names: tuple[tuple[str, ...], tuple[str, ...]]

    def values_builder(self) -> Callable[[ElementColumns, np.ndarray], tuple[list[Any], list[int]]]:
        """``(columns, order) -> (records, input indexes)`` in ``order``; runs on the workers."""
        builders = [rows_builder(names) for names in self.field_names]

        def build(batch: ElementColumns, order: np.ndarray) -> tuple[list[Any], list[int]]:
            inputs = np.asarray(batch[self.input_column])[order]
            values: list[Any] = [None] * len(order)
            for index, (build_rows, columns) in enumerate(zip(builders, self.frame_columns)):
                positions = np.flatnonzero(inputs == index)
                if len(positions):
                    rows = build_rows([column_values(batch[c], order[positions]) for c in columns])
                    for position, row in zip(positions.tolist(), rows):
                        values[position] = row
            return values, inputs.tolist()

        return build


def _input_frame_column(input_index: int, name: str) -> str:
    return f"{INTERNAL_COLUMN_PREFIX}in{input_index + 1}_{name}"


def _placeholder(data_type: DataType) -> Column:
    """A value of ``data_type`` for the other input's rows. Not null where pandas would change the column's dtype
    for a null (integers become floats, booleans objects), so the real input's values arrive unchanged."""
    if isinstance(data_type, IntegralType):
        return F.lit(0).cast(data_type)
    if isinstance(data_type, BooleanType):
        return F.lit(False)
    return F.lit(None).cast(data_type)


def _check_same_key_types(first: DataFrame, second: DataFrame, first_keys: Sequence[str],
                          second_keys: Sequence[str]) -> None:
    """Equal keys must hash to the same key group, so the key columns must pair up by count and type."""
    first_types = [first.schema[c].dataType.simpleString() for c in first_keys]
    second_types = [second.schema[c].dataType.simpleString() for c in second_keys]
    if first_types != second_types:
        described = [", ".join(f"{c} {t}" for c, t in zip(keys, types))
                     for keys, types in ((first_keys, first_types), (second_keys, second_types))]
        raise ConfigurationError(
            f"the key columns of both inputs must match in number and type, pairwise: first_key_columns are "
            f"({described[0]}), second_key_columns are ({described[1]}). Cast or select the second input's key "
            f"columns to the first input's types (e.g. df.withColumn(name, F.col(name).cast('bigint'))) so equal "
            f"keys meet in the same key group"
        )


def _project(df: DataFrame, input_index: int, keys: Sequence[str], key_names: Sequence[str],
             event_time_column: Optional[str], value_fields: Sequence[list[Any]], drop_late_events: bool,
             with_watermark: bool) -> DataFrame:
    """Input ``input_index`` in the common schema (see the module docstring)."""
    columns = [unmarked_column(df.schema[key], name) for key, name in zip(keys, key_names)]
    columns.append(F.lit(input_index).cast("int").alias(INPUT_COLUMN))
    if event_time_column is not None:
        what = f"event_time_columns[{input_index}] (of the {_ORDINALS[input_index]} input)"
        columns.append(event_time_millis(df, event_time_column, what).alias(EVENT_TIME_MS_COLUMN))
    for index, fields in enumerate(value_fields):
        for field in fields:
            name = _input_frame_column(index, field.name)
            columns.append(unmarked_column(field, name) if index == input_index
                           else _placeholder(field.dataType).alias(name))
    if with_watermark:
        marked = watermark_field(df)
        if marked is None:
            columns.append(F.lit(None).cast(TimestampType()).alias(LATE_EVENTS_ANCHOR_COLUMN))
        elif drop_late_events:
            # Spark's late-row filter tests this column: the input's own watermarked times.
            rebuilt = without_watermark(F.col(marked.name), marked.dataType)
            columns.append(rebuilt.alias(LATE_EVENTS_ANCHOR_COLUMN, metadata=dict(marked.metadata)))
        else:
            columns.append(late_events_anchor(dict(marked.metadata)))
    return df.select(*columns)


def keyed_co_process(
    first: DataFrame,
    second: DataFrame,
    first_key_columns: Sequence[str],
    second_key_columns: Sequence[str],
    function: KeyedCoProcessFunction,
    output_schema: Union[StructType, str],
    *,
    event_time_columns: Optional[tuple[str, str]] = None,
    side_outputs: Optional[dict[str, Union[StructType, str]]] = None,
    options: Optional[KeyedProcessOptions] = None,
    **settings: Any,
) -> DataFrame:
    """Run ``function`` over ``first`` (keyed by ``first_key_columns``) and ``second`` (keyed by
    ``second_key_columns``); returns the output stream (append mode).

    * ``process_element1(value, ctx)`` gets each row of ``first`` as a ``pyspark.sql.Row`` of ``first``'s
      columns, ``process_element2`` each row of ``second`` as a Row of ``second``'s columns. The key columns pair
      up by position and must have the same types (cast one side otherwise); ``ctx.get_current_key()`` is the
      key's value (a tuple for several key columns), the same for both inputs. A call processes its keys one after
      another, each key's elements of both inputs merged in event-time order.
    * ``event_time_columns=(first_column, second_column)`` (timestamps, or bigints of epoch milliseconds) give
      ``ctx.timestamp()``. With ``time_mode="event_time"`` (default) both inputs need ``withWatermark`` upstream;
      the watermark is Spark's global one, the minimum of both inputs' watermarks (Spark's default
      ``spark.sql.streaming.multipleWatermarkPolicy``), so event-time timers fire when both inputs have passed
      them. Until both inputs have delivered rows the watermark stays at 0 (Spark counts an input without data as
      0; Flink waits for both inputs' first watermarks the same way).
    * Late elements of either input reach ``process_element1`` / ``process_element2`` as in Flink
      (``ctx.timestamp() < ctx.timer_service().current_watermark()`` tells them apart); ``drop_late_events=True``
      lets Spark drop them before the function instead.
    * ``side_outputs`` as :func:`keyedstate.spark.keyed_process`'s (read with ``main_output`` / ``side_output``).
    * ``options``: see :class:`keyedstate.spark.KeyedProcessOptions`, whose every field is also a keyword argument
      here that replaces that field of ``options``, with keyed_process's meaning (``initial_state``'s key column
      types are compared with ``first_key_columns``').
    """
    if not isinstance(function, KeyedCoProcessFunction):
        raise ConfigurationError(
            f"function must be a KeyedCoProcessFunction instance (process_element1 and process_element2), got "
            f"{type(function).__qualname__}; a KeyedProcessFunction runs with keyed_process"
        )
    options = KeyedProcessOptions.of("keyed_co_process", options, settings)
    layout = output_layout(output_schema, side_outputs, options)
    inputs = (first, second)
    key_lists = (first_key_columns, second_key_columns)
    for ordinal, df, keys in zip(_ORDINALS, inputs, key_lists):
        if not (hasattr(df, "schema") and hasattr(df, "unionByName")):  # classic or Spark Connect DataFrame
            raise ConfigurationError(f"the {ordinal} input must be a DataFrame, got {type(df).__qualname__}")
        try:
            check_key_columns(df, keys)
        except ConfigurationError as error:
            raise ConfigurationError(f"{ordinal}_key_columns: {error}") from None
    _check_same_key_types(first, second, first_key_columns, second_key_columns)
    event_times = _event_time_columns(event_time_columns, options.time_mode)
    if options.time_mode == EVENT_TIME:
        for ordinal, df, column in zip(_ORDINALS, inputs, event_times):
            assert column is not None  # in event time _event_time_columns returns both or raises
            check_watermark(df, column, f"the {ordinal} input (before keyed_co_process)")
        policy = str(first.sparkSession.conf.get(_WATERMARK_POLICY_CONF, "min")).lower()
        if policy != "min":
            logger.warning(
                "%s is %r: the watermark follows the faster input, so event-time timers can fire before the slower "
                "input has delivered its elements (Flink's two-input operators use the minimum); set it to 'min'",
                _WATERMARK_POLICY_CONF, policy,
            )
    value_fields = [list(df.schema.fields) for df in inputs]
    key_names = list(first_key_columns)
    with_watermark = any(watermark_field(df) is not None for df in inputs)
    projected = [
        _project(df, index, keys, key_names, column, value_fields, options.drop_late_events, with_watermark)
        for index, (df, keys, column) in enumerate(zip(inputs, key_lists, event_times))
    ]
    union = projected[0].unionByName(projected[1])
    prepared, grouping_column = with_grouping_column(union, key_names, options)
    frame_columns = [tuple(_input_frame_column(i, f.name) for f in fields) for i, fields in enumerate(value_fields)]
    field_names = [tuple(f.name for f in fields) for fields in value_fields]
    columns = TwoInputColumns(
        input_column=INPUT_COLUMN,
        frame_columns=(frame_columns[0], frame_columns[1]),
        field_names=(field_names[0], field_names[1]),
    )
    # Spark groups by the key columns themselves without key groups: their type is in the checkpoint's state schema
    sent = [c for names in columns.frame_columns for c in names]
    if options.num_key_groups is not None:
        sent += key_names
    prepared, micros_columns = send_timestamps_as_micros(prepared, sent, key_names, "keyed_co_process")
    prepared, grouping, args = group_call(
        first, prepared, function, layout, options, key_columns=key_names, value_columns=(),
        grouping_column=grouping_column, micros_columns=micros_columns, inputs=columns,
        time_ms_column=None if event_time_columns is None else EVENT_TIME_MS_COLUMN,
    )
    output = prepared.groupBy(*grouping).applyInPandasWithState(*args)
    return with_progress_metrics(output, function, options, output_schema, side_outputs)


def _event_time_columns(event_time_columns: Any, time_mode: str) -> tuple[Optional[str], Optional[str]]:
    if event_time_columns is None:
        if time_mode == EVENT_TIME:
            raise ConfigurationError(
                "time_mode='event_time' needs event_time_columns=(first_column, second_column) (timestamp columns "
                "with watermarks: df.withWatermark(column, '10 seconds') on both inputs); use "
                "time_mode='processing_time' for streams without event time"
            )
        return None, None
    if (isinstance(event_time_columns, str) or not isinstance(event_time_columns, (tuple, list))
            or len(event_time_columns) != 2 or not all(isinstance(c, str) for c in event_time_columns)):
        raise ConfigurationError(
            f"event_time_columns must be a pair of column names, (first input's column, second input's column), "
            f"got {event_time_columns!r}"
        )
    return event_time_columns[0], event_time_columns[1]
