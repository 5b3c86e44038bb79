"""Kafka source -> keyedstate-kafka sink (exactly once) on ``local-cluster[2,1,1024]``, run as a subprocess by
test_kafka_sink_zombie.py, which freezes the executor of a paused write task so that Spark reruns the task on another
executor while the first attempt is still alive.

usage: python kafka_sink_zombie_app.py BOOTSTRAP IN_TOPIC OUT_TOPIC PREFIX BASE

One batch (``Trigger.AvailableNow``). Partition 0 of batch 0, in ``BASE/markers``:

* its first attempt produces its records into its open transaction, writes ``zombie-paused`` (its executor JVM's pid
  and the values it produced) and waits for ``zombie-release``; then it goes on to commit and writes
  ``zombie-outcome`` (the exception it got, or ``committed N``);
* the attempt Spark runs in its place writes ``retry-committed`` (attempt number, executor JVM pid, records) once
  its transaction committed, then waits for ``zombie-outcome`` before returning: the first attempt resumes while
  the batch is still running in Spark, as a slow original does next to its speculative copy.

The executor heartbeat timeout is :data:`HEARTBEAT_TIMEOUT` (checked every second), so that the driver gives a frozen
executor up quickly.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from connectors.kafka import KafkaSource
from connectors.kafka.sink import KafkaStreamWriter
from tests.spark.local_cluster import executor_jvm_pid, use_private_spark_home

#: How long the driver waits for a frozen executor's heartbeats before it declares the executor lost.
HEARTBEAT_TIMEOUT = "6s"


def _mark(path: Path, text: str) -> None:
    """Write a marker atomically: the test polls for it from another process."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


class ZombieWriter(KafkaStreamWriter):
    """The real sink with the pause of the module docstring."""

    def __init__(self, opts, schema, markers: str) -> None:
        super().__init__(opts, schema)
        self.markers = markers

    def write(self, iterator):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.getLocalProperty("streaming.sql.batchId") != "0" or ctx.partitionId() != 0:
            return super().write(iterator)
        markers = Path(self.markers)
        if ctx.attemptNumber() == 0:
            try:
                message = super().write(_pause_after(iterator, markers))
            except Exception as exc:
                _mark(markers / "zombie-outcome", f"{type(exc).__name__}: {exc}")
                raise
            _mark(markers / "zombie-outcome", f"committed {message.records}")
            return message
        message = super().write(iterator)
        _mark(markers / "retry-committed", f"{ctx.attemptNumber()} {executor_jvm_pid()} {message.records}")
        _wait_for(markers / "zombie-outcome", 120)
        return message


def _pause_after(iterator, markers: Path):
    values = []
    for batch in iterator:
        values.extend(v.decode() if isinstance(v, bytes) else v for v in batch.column("value").to_pylist())
        yield batch
    # When the driver gives this executor up, the standalone worker kills its JVM and the pyspark daemon, losing its
    # stdin, sends its workers SIGHUP. An executor behind a network partition keeps running instead: so does this
    # attempt, which is what a zombie is.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _mark(markers / "zombie-paused", f"{executor_jvm_pid()} {' '.join(values)}")
    _wait_for(markers / "zombie-release", 600)


def main() -> int:
    bootstrap, in_topic, out_topic, prefix, base = sys.argv[1:6]
    use_private_spark_home(Path(base) / "spark-home")
    from pyspark.sql import SparkSession

    markers = str(Path(base) / "markers")

    class ZombieKafka(KafkaSource):
        @classmethod
        def name(cls) -> str:
            return "zombie-kafka"

        def streamWriter(self, schema, overwrite):
            from connectors.kafka.sink_options import parse_sink_options

            return ZombieWriter(parse_sink_options(dict(self.options)), schema, markers)

    # Three JVMs start on a small machine (C1 only comes from the test's environment: tests/short_lived_jvms.py):
    # the serial collector, and the query is planned while the executors start instead of after they registered.
    fast_start = "-XX:+UseSerialGC"
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("kafka-sink-zombie")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.extraJavaOptions", fast_start)
             .config("spark.executor.extraJavaOptions", fast_start)
             .config("spark.scheduler.minRegisteredResourcesRatio", "0")
             .config("spark.executor.heartbeatInterval", "1s")
             .config("spark.storage.blockManagerHeartbeatTimeoutMs", HEARTBEAT_TIMEOUT)
             .config("spark.network.timeoutInterval", "1s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(KafkaSource)
    spark.dataSource.register(ZombieKafka)
    events = (spark.readStream.format("keyedstate-kafka")
              .options(**{"kafka.bootstrap.servers": bootstrap, "subscribe": in_topic, "startingOffsets": "earliest",
                          "commitOffsets": "false"}).load())
    query = (events.selectExpr("key", "concat('out-', cast(value as string)) as value")
             .writeStream.format("zombie-kafka")
             # the zombie's transaction stays open while it is frozen: far below this, so only fencing can end it
             .options(**{"kafka.bootstrap.servers": bootstrap, "topic": out_topic, "transactionalIdPrefix": prefix,
                         "kafka.transaction.timeout.ms": "300000"})
             .option("checkpointLocation", str(Path(base) / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
