"""Kafka source -> keyed_process -> keyedstate-kafka sink (exactly once), run as a subprocess by
test_kafka_sink_crash.py so the test can SIGKILL the driver at chosen points.

usage: python kafka_sink_driver_app.py BOOTSTRAP IN_TOPIC OUT_TOPIC PREFIX CHECKPOINT MARKERS MODE

The function keeps a running count per user and emits ``user:payload:count`` for every input record, so a lost,
duplicated or re-counted record shows in the output. MODE:

* ``pause-in-write=B``: the first attempt of partition 0 of batch B produces its records, then writes
  ``MARKERS/writing-B`` and hangs before committing its transaction;
* ``pause-in-commit=B``: the sink's driver-side ``commit`` of batch B (after every task committed its transaction,
  before Spark's commit log entry) writes ``MARKERS/committing-B`` and hangs;
* ``run``: processing-time trigger, nothing injected (the test kills it after a commit log entry);
* ``finish-with-task-failure``: ``Trigger.AvailableNow`` with task retries (``local[2,2]``); the first attempt of the
  first partition-0 task that writes records raises after its transaction committed (``MARKERS/failed-once``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from connectors.kafka import KafkaSource
from connectors.kafka.sink import KafkaStreamWriter
from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor

OUTPUT = "user STRING, payload STRING, count BIGINT"
RECORDS_PER_BATCH = 60


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value["user"], value["payload"], count


class InstrumentedWriter(KafkaStreamWriter):
    """The real sink with the pauses and the failure of MODE (see the module docstring)."""

    def __init__(self, opts, schema, mode: str, markers: str) -> None:
        super().__init__(opts, schema)
        self.mode, self.markers = mode, markers

    def write(self, iterator):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId"))
        first_attempt_of_p0 = ctx.partitionId() == 0 and ctx.attemptNumber() == 0
        if self.mode == f"pause-in-write={batch}" and first_attempt_of_p0:
            iterator = self._pause_after(iterator, Path(self.markers, f"writing-{batch}"))
        message = super().write(iterator)
        failed = Path(self.markers, "failed-once")
        if self.mode == "finish-with-task-failure" and first_attempt_of_p0 and message.records and not failed.exists():
            failed.write_text(f"batch {batch}, {message.records} records committed")
            raise RuntimeError("injected failure after the task's transaction committed")
        return message

    @staticmethod
    def _pause_after(iterator, marker: Path):
        yield from iterator
        time.sleep(1)  # librdkafka sends the produced records (linger.ms) into the open transaction
        marker.write_text("records produced, transaction open")
        time.sleep(600)  # killed meanwhile

    def commit(self, messages, batchId):
        if self.mode == f"pause-in-commit={batchId}":
            Path(self.markers, f"committing-{batchId}").write_text("all tasks committed")
            time.sleep(600)
        super().commit(messages, batchId)


def main() -> int:
    bootstrap, in_topic, out_topic, prefix, checkpoint, markers, mode = sys.argv[1:8]
    from pyspark.sql import SparkSession

    from keyedstate.spark import keyed_process

    class InstrumentedKafka(KafkaSource):
        @classmethod
        def name(cls) -> str:
            return "instrumented-kafka"

        def streamWriter(self, schema, overwrite):
            from connectors.kafka.sink_options import parse_sink_options

            return InstrumentedWriter(parse_sink_options(dict(self.options)), schema, mode, markers)

    spark = (SparkSession.builder.master("local[2,2]" if mode.startswith("finish") else "local[2]")
             .appName(f"kafka-sink-{mode}").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaSource)
    spark.dataSource.register(InstrumentedKafka)
    events = (spark.readStream.format("keyedstate-kafka")
              .options(**{"kafka.bootstrap.servers": bootstrap, "subscribe": in_topic, "startingOffsets": "earliest",
                          "commitOffsets": "false", "maxOffsetsPerTrigger": str(RECORDS_PER_BATCH)}).load()
              .selectExpr("cast(key as string) as user", "cast(value as string) as payload", "timestamp as ts")
              .withWatermark("ts", "0 seconds"))
    counted = keyed_process(events, ["user"], RunningCount(), OUTPUT, event_time_column="ts", num_key_groups=7)
    writer = (counted.selectExpr("user as key", "concat_ws(':', user, payload, cast(count as string)) as value")
              .writeStream.format("instrumented-kafka")
              .options(**{"kafka.bootstrap.servers": bootstrap, "topic": out_topic, "transactionalIdPrefix": prefix,
                          "kafka.transaction.timeout.ms": "120000"})
              .option("checkpointLocation", checkpoint))
    if mode.startswith("finish"):
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    query = writer.start()
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
