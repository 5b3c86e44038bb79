"""Spark's watermark marker on a stream's columns, and where keyedstate puts it.

``df.withWatermark(column, delay)`` marks ``column`` with the metadata key ``spark.watermarkDelayMs``. A stateful
operator finds the watermark through that marker (event-time timeouts need one) and drops input rows whose marked
column is older than the watermark. keyedstate moves the marker to one internal column, so that late elements reach
the function (as in Flink) and so that exactly one column carries it (Spark 3.5 and 4.0 refuse a stream with two).
"""

from __future__ import annotations

from typing import Optional

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructField, TimestampType

from keyedstate.errors import ConfigurationError

__all__ = [
    "WATERMARK_METADATA_KEY",
    "LATE_EVENTS_ANCHOR_COLUMN",
    "without_watermark",
    "keep_late_events",
    "watermark_field",
    "unmarked_column",
    "late_events_anchor",
    "check_watermark",
]

WATERMARK_METADATA_KEY = "spark.watermarkDelayMs"
LATE_EVENTS_ANCHOR_COLUMN = "_keyedstate_watermark_anchor"
# Far in the future, yet inside pandas' nanosecond range (which ends in 2262): it reaches the Python workers.
_LATE_EVENTS_ANCHOR_TIME = "2262-01-01 00:00:00"


def without_watermark(column: Column, data_type: DataType) -> Column:
    """The same values through an expression no optimizer rule folds back into the attribute: an aliased attribute
    keeps the watermark marker on some Spark versions (4.0.x, 3.5.x) whatever metadata the alias is given."""
    if isinstance(data_type, TimestampType):
        return F.timestamp_micros(F.unix_micros(column))
    return column


def watermark_field(df: DataFrame) -> Optional[StructField]:
    """The column of ``df`` that carries the watermark marker, or None."""
    for field in df.schema.fields:
        if WATERMARK_METADATA_KEY in (field.metadata or {}):
            return field
    return None


def unmarked_column(field: StructField, name: Optional[str] = None) -> Column:
    """Column ``field`` (renamed to ``name``) without the watermark marker."""
    if WATERMARK_METADATA_KEY not in (field.metadata or {}):
        column = F.col(field.name)
        return column if name is None or name == field.name else column.alias(name)
    stripped = {k: v for k, v in field.metadata.items() if k != WATERMARK_METADATA_KEY}
    return without_watermark(F.col(field.name), field.dataType).alias(name or field.name, metadata=stripped)


def late_events_anchor(marker: dict) -> Column:
    """A constant far-future timestamp column carrying the watermark ``marker``: Spark's analyzer still finds the
    watermark it requires for event-time timeouts, and its late-row filter never matches."""
    return F.lit(_LATE_EVENTS_ANCHOR_TIME).cast(TimestampType()).alias(LATE_EVENTS_ANCHOR_COLUMN, metadata=marker)


def keep_late_events(df: DataFrame) -> DataFrame:
    """Spark drops input rows older than the watermark in front of a stateful operator, testing the column that
    carries the watermark marker; Flink delivers late elements to process_element. The marker moves to a constant
    far-future anchor column: the query's watermark (computed upstream) is unchanged, and the late-row filter never
    matches."""
    marked = watermark_field(df)
    if marked is None:
        return df
    return df.select(*[unmarked_column(field) for field in df.schema.fields], late_events_anchor(dict(marked.metadata)))


def check_watermark(df: DataFrame, event_time_column: str, fix: str) -> None:
    """Event-time timers need Spark's event-time timeout, which needs a watermark upstream; Spark says so only when
    the query starts, in its own words. ``fix`` names the input and the call the user should change."""
    if df.isStreaming and watermark_field(df) is None:
        raise ConfigurationError(
            f"time_mode='event_time' needs a watermark on {fix}, and it has none: add "
            f"df.withWatermark({event_time_column!r}, '10 seconds') (the delay is how late elements may arrive), "
            f"or use time_mode='processing_time'"
        )
