"""Late elements (event time older than the watermark) reach process_element, as in Flink, on every Spark version:
the watermark marker moves to an internal anchor column by a mechanism that does not depend on how a version
treats an aliased attribute's metadata."""

from __future__ import annotations

import pytest

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.spark import apply_in_pandas_with_state_args
from keyedstate.spark.watermarks import LATE_EVENTS_ANCHOR_COLUMN
from tests.spark.file_stream import start_query, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "user STRING, ts TIMESTAMP"
OUTPUT = "user STRING, n BIGINT, late BOOLEAN"
WATERMARK = "spark.watermarkDelayMs"


class CountAndFlagLate(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value["user"], count, ctx.timestamp() < ctx.timer_service().current_watermark()


def run(spark, tmp_path, **options) -> list[tuple]:
    (tmp_path / "in").mkdir()
    query = start_query(spark, tmp_path, CountAndFlagLate(), schema=SCHEMA, key_columns=["user"],
                        output_schema=OUTPUT, query_name=f"late_{tmp_path.name}", **options)
    try:
        write_input(tmp_path / "in", 0, [{"user": "a", "ts": "2024-01-01T00:10:00Z"}])
        query.processAllAvailable()
        write_input(tmp_path / "in", 1, [{"user": "a", "ts": "2024-01-01T00:00:00Z"}])  # 10 minutes late
        query.processAllAvailable()
    finally:
        query.stop()
    return sorted(tuple(row) for row in spark.table(f"late_{tmp_path.name}").collect())


def test_a_late_element_reaches_process_element_and_is_recognisable(spark, tmp_path):
    assert run(spark, tmp_path) == [("a", 1, False), ("a", 2, True)]


def test_drop_late_events_lets_spark_drop_it_before_the_function(spark, tmp_path):
    assert run(spark, tmp_path, drop_late_events=True) == [("a", 1, False)]


def test_only_the_internal_anchor_carries_the_watermark_marker(spark, tmp_path):
    source = spark.readStream.schema(SCHEMA).json(str(tmp_path)).withWatermark("ts", "0 seconds")
    prepared, _, _ = apply_in_pandas_with_state_args(source, ["user"], CountAndFlagLate(), OUTPUT,
                                                     event_time_column="ts")
    marked = [field.name for field in prepared.schema.fields if WATERMARK in (field.metadata or {})]
    assert marked == [LATE_EVENTS_ANCHOR_COLUMN]  # two marked columns fail analysis ("more than one event time")
