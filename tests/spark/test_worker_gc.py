"""Spark's Python workers keep their startup objects (the modules of pyspark, pandas, numpy and keyedstate) out of
the full garbage collection PySpark's daemon runs after every task; what keyedstate creates for a query, and every
process that is not a Spark worker, stays with the collector."""

from __future__ import annotations

import gc

import pytest

from keyedstate import KeyedProcessFunction
from keyedstate.spark import keyed_process
from tests.spark.file_stream import write_input
from tests.spark.test_group_function_unit import _frame, _run

pytestmark = pytest.mark.spark


class ReportsCollection(KeyedProcessFunction):
    """Emits, per element, how many objects its worker has frozen and whether this function is still collectable."""

    def process_element(self, value, ctx):
        collectable = any(tracked is self for tracked in gc.get_objects())  # frozen objects are in no generation
        yield value.user, gc.get_freeze_count(), collectable


def test_a_worker_freezes_its_startup_objects_before_the_first_call_and_not_the_query_it_runs(spark, tmp_path):
    for batch in range(2):
        write_input(tmp_path / "in", batch, [{"user": f"u{i}", "ts": "2024-01-01T00:00:00Z"} for i in range(3)])
    source = (spark.readStream.schema("user STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
              .json(str(tmp_path / "in")).withWatermark("ts", "1 minute"))
    output = keyed_process(source, ["user"], ReportsCollection(), "user STRING, frozen BIGINT, collectable BOOLEAN",
                           event_time_column="ts", num_key_groups=4)
    query = (output.writeStream.format("memory").queryName("worker_gc").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    rows = spark.sql("SELECT * FROM worker_gc").collect()
    assert len(rows) == 6
    assert all(row.frozen > 10_000 for row in rows), rows  # the modules: tens of thousands of objects
    assert all(row.collectable for row in rows), rows


def test_a_group_function_called_outside_a_spark_task_leaves_the_process_collections_alone():
    frozen = gc.get_freeze_count()
    _run(_frame(["a", "b"], ["p", "q"], [1, 2]))
    assert gc.get_freeze_count() == frozen
