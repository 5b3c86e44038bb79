"""The floor of any Python streaming data source on Spark: the Kafka schema, no Kafka.

``bench/test_kafka_source.py`` measures this source beside keyedstate-kafka. It plans and reads exactly like
keyedstate-kafka (one stream-reader process per query, four partitions, Arrow batches of 10,000 rows of Kafka's
schema: distinct keys, 100-byte values, topic, partition, offset, timestamp, timestampType, null headers), but its
``read`` only slices Arrow arrays built once per task, so it costs next to no Python time per record. What it still
pays is what every Python data source pays in Spark: starting the stream-reader process per query, and the JVM
turning the Arrow batches into rows. The gap between it and keyedstate-kafka is the cost of reading from Kafka.
``maxOffsetsPerTrigger`` splits the records over micro-batches as keyedstate-kafka's option of that name does.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from connectors.kafka.fetch import ARROW_SCHEMA
from connectors.kafka.source import SCHEMA

__all__ = ["FLOOR_FORMAT", "PythonSourceFloor"]

FLOOR_FORMAT = "keyedstate-bench-floor"
_PARTITIONS = 4
_BATCH_ROWS = 10_000  # keyedstate-kafka's default maxBatchRecords


class _Range(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        self.partition, self.start, self.end = partition, start, end


class _FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, records: int, max_per_trigger: int | None) -> None:
        self.records = records
        self.max_per_trigger = max_per_trigger

    def initialOffset(self) -> dict:
        return {"records": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_per_trigger is None else ReadMaxRows(self.max_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the records are fixed at creation: there is never more to come

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if isinstance(limit, ReadMaxRows):
            return {"records": min(self.records, start["records"] + limit.max_rows)}
        return {"records": self.records}

    def partitions(self, start: dict, end: dict) -> list[_Range]:
        first, last = start["records"], end["records"]
        bounds = [first + (last - first) * i // _PARTITIONS for i in range(_PARTITIONS + 1)]
        return [_Range(p, bounds[p], bounds[p + 1]) for p in range(_PARTITIONS)]

    def read(self, partition: _Range) -> Iterator[pa.RecordBatch]:
        rows = min(_BATCH_ROWS, partition.end - partition.start)
        if rows <= 0:
            return
        keys = pa.array([str(i).encode() for i in range(rows)], pa.binary())
        values = pa.repeat(pa.scalar(b"x" * 100, pa.binary()), rows)
        topics = pa.repeat(pa.scalar("floor", pa.string()), rows)
        partitions = pa.repeat(pa.scalar(partition.partition, pa.int32()), rows)
        timestamp_type = ARROW_SCHEMA.field("timestamp").type
        timestamps = pa.repeat(pa.scalar(1_700_000_000_000_000, pa.int64()), rows).cast(timestamp_type)
        types = pa.repeat(pa.scalar(0, pa.int32()), rows)
        headers = pa.nulls(rows, ARROW_SCHEMA.field("headers").type)
        for offset in range(partition.start, partition.end, rows):
            n = min(rows, partition.end - offset)
            yield pa.RecordBatch.from_arrays([
                keys.slice(0, n), values.slice(0, n), topics.slice(0, n), partitions.slice(0, n),
                pa.array(np.arange(offset, offset + n, dtype=np.int64)), timestamps.slice(0, n), types.slice(0, n),
                headers.slice(0, n),
            ], schema=ARROW_SCHEMA)

    def commit(self, end: dict) -> None:
        pass


class PythonSourceFloor(DataSource):
    """``spark.readStream.format("keyedstate-bench-floor").option("records", N)``: N records of Kafka's schema
    (``maxOffsetsPerTrigger``: at most that many per micro-batch)."""

    @classmethod
    def name(cls) -> str:
        return FLOOR_FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> _FloorReader:
        limit = self.options.get("maxOffsetsPerTrigger")
        return _FloorReader(int(self.options["records"]), None if limit is None else int(limit))
