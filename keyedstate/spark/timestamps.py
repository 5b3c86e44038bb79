"""Timestamp columns on their way to the Python workers, outside pandas' nanosecond range (1677-09-21 to 2262-04-11).

Spark hands ``applyInPandasWithState`` its rows as pandas columns, and PySpark casts every timestamp column to
``datetime64[ns]`` first: a valid Spark timestamp after 2262-04-11 (such as the ``9999-12-31`` many systems use for
"never") or before 1677-09-21 fails the batch inside PySpark's serializer with ``ArrowInvalid``. So the driver
sends such columns as ``bigint`` microseconds of the wall-clock time PySpark would have shown (the session time
zone's, tz-naive), and the worker turns them into the same ``datetime.datetime`` s, for every year Spark allows.
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, TimestampNTZType, TimestampType

from keyedstate.spark.watermarks import WATERMARK_METADATA_KEY

__all__ = ["send_timestamps_as_micros", "PANDAS_RANGE"]

#: Spark's null in an encoded column (a bigint with nulls would reach pandas as float64, losing microseconds); numpy
#: reads the same int64 as NaT (keyedstate.spark.group_elements.decode_micros_columns).
_NULL = -(2**63)
#: The wall-clock microseconds pandas' datetime64[ns] holds (its int64 nanoseconds, truncated).
_PANDAS_MICROS = (-(2**63 - 1) // 1000 + 1, (2**63 - 1) // 1000)
PANDAS_RANGE = "1677-09-21 00:12:43.145225 to 2262-04-11 23:47:16.854775"


def _wall_clock_micros(name: str, data_type: DataType) -> Column:
    quoted = f"`{name.replace('`', '``')}`"
    if isinstance(data_type, TimestampType):
        # PySpark shows a TIMESTAMP as the session time zone's wall clock; from_utc_timestamp (Spark 2.4+, unlike
        # the NTZ expression below) shifts the instant by the same offset.
        return F.expr(f"unix_micros(from_utc_timestamp({quoted}, current_timezone()))")
    return F.expr(f"timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {quoted})")


def send_timestamps_as_micros(df: DataFrame, columns: Sequence[str], key_columns: Sequence[str],
                              call: str) -> tuple[DataFrame, tuple[str, ...]]:
    """``df`` with the timestamp columns among ``columns`` as bigint wall-clock microseconds; and their names.

    The column that carries Spark's watermark marker (``drop_late_events=True`` leaves it on the event-time column)
    must stay a timestamp for Spark's late-row filter; a value of it outside pandas' range fails the batch with a
    message naming the column, the key and the range instead of PySpark's ``ArrowInvalid``.
    """
    encoded: list[str] = []
    projection: list[Column] = []
    checked_any = False
    for field in df.schema.fields:
        name = field.name
        if name not in columns or not isinstance(field.dataType, (TimestampType, TimestampNTZType)):
            projection.append(F.col(f"`{name}`"))
        elif WATERMARK_METADATA_KEY in (field.metadata or {}):
            micros = _wall_clock_micros(name, field.dataType)
            key = F.concat_ws(", ", *[F.col(f"`{k}`").cast("string") for k in key_columns])
            message = F.concat(
                F.lit(f"{call}: column {name!r} holds "), F.col(f"`{name}`").cast("string"), F.lit(" for key ("),
                key, F.lit(f"), outside {PANDAS_RANGE}, the range of the pandas columns Spark hands to Python. The "
                           f"column carries the watermark and drop_late_events=True keeps it a timestamp; with "
                           f"drop_late_events=False (the default) any valid Spark timestamp works"))
            out_of_range = (micros < _PANDAS_MICROS[0]) | (micros > _PANDAS_MICROS[1])
            checked = F.when(out_of_range, F.raise_error(message)).otherwise(F.col(f"`{name}`"))
            projection.append(checked.alias(name, metadata=field.metadata))
            checked_any = True
        else:
            projection.append(F.coalesce(_wall_clock_micros(name, field.dataType), F.lit(_NULL)).alias(name))
            encoded.append(name)
    if not encoded and not checked_any:
        return df, ()
    return df.select(*projection), tuple(encoded)

