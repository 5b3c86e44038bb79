"""A Spark write task of the ``keyedstate-kafka`` sink interrupted while half of its records are in an open
transaction: by a broker restart (the query rides it out, or fails with one of our errors and continues when
restarted on the same checkpoint), or by ``query.stop()`` (the transaction stays open, invisible, until the
restarted query's replay aborts it). Either way a read_committed consumer sees every record exactly once.

The broker restart is a SIGKILL, then a start on the same port and data, as a crash would."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from connectors.kafka import FORMAT_NAME, KafkaSource
from connectors.kafka import errors as kafka_connector_errors
from connectors.kafka.sink import KafkaStreamWriter
from kafka_helpers import create_topic, produce, read_committed, unique, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

RECORDS = 40  # two batches of 20
PAUSING_FORMAT = "keyedstate-kafka-pausing"


@pytest.fixture(autouse=True, scope="module")
def _writer_pickled_by_value():
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's Python workers cannot import this module
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _pause_midway(batches, markers: Path):
    """Yield half of the rows, then wait (the broker restarts meanwhile) for ``markers/resume``, then the rest."""
    batches = list(batches)
    rows = [b.slice(i, 1) for b in batches for i in range(b.num_rows)]
    half = len(rows) // 2
    yield from rows[:half]
    produced = [v.decode() if isinstance(v, bytes) else v for r in rows[:half] for v in r.column("value").to_pylist()]
    (markers / ".paused").write_text(" ".join(produced))
    (markers / ".paused").rename(markers / "paused")
    deadline = time.monotonic() + 300
    while not (markers / "resume").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    yield from rows[half:]


def _pausing_in_batch_0(iterator, markers: Path):
    """The rows of this task; the first time partition 0 of batch 0 is written, paused halfway."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    first_time = not (markers / "paused").exists()
    if ctx.getLocalProperty("streaming.sql.batchId") == "0" and ctx.partitionId() == 0 and first_time:
        return _pause_midway(iterator, markers)
    return iterator


class _PausingWriter(KafkaStreamWriter):
    """The real sink, paused once in the middle of a write (see :func:`_pausing_in_batch_0`)."""

    markers = ""

    def write(self, iterator):
        return super().write(_pausing_in_batch_0(iterator, Path(self.markers)))


class _PausingKafka(KafkaSource):
    @classmethod
    def name(cls) -> str:
        return PAUSING_FORMAT

    def streamWriter(self, schema, overwrite):
        from connectors.kafka.sink_options import parse_sink_options

        options = dict(self.options)
        markers = options.pop("markers")
        writer = _PausingWriter(parse_sink_options(options), schema)
        writer.markers = markers
        return writer


def _start(spark, bs: str, source: str, sink_format: str, checkpoint: Path, **options: str):
    return (spark.readStream.format(FORMAT_NAME)
            .options(**{"kafka.bootstrap.servers": bs, "subscribe": source, "startingOffsets": "earliest",
                        "commitOffsets": "false", "maxOffsetsPerTrigger": "20"}).load()
            .selectExpr("key", "concat('out-', cast(value as string)) as value")
            .writeStream.format(sink_format).options(**{"kafka.bootstrap.servers": bs, **options})
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def _wait_until_paused_halfway(query, bs: str, out: str, markers: Path) -> set[str]:
    """The values partition 0 of batch 0 wrote before pausing, once they are in the broker's log (inside the task's
    open transaction)."""
    wait_for(lambda: (markers / "paused").exists() or not query.isActive, 120, "batch 0 to be writing")
    assert query.isActive, query.exception()
    produced = set((markers / "paused").read_text().split())
    wait_for(lambda: produced <= {v.decode() for _, _, v, _ in read_committed(bs, out, isolation="read_uncommitted")},
             60, "the first half to reach the broker, inside the open transaction")
    return produced


def _topics_and_markers(spark, bs: str, tmp_path: Path) -> tuple[str, str, Path]:
    """(source topic holding RECORDS records, empty output topic, markers directory) for a pausing query."""
    spark.dataSource.register(_PausingKafka)
    source, out = create_topic(bs, 2), create_topic(bs, 2)
    produce(bs, source, RECORDS, 2)
    markers = tmp_path / "markers"
    markers.mkdir()
    return source, out, markers


def test_a_broker_restart_during_a_spark_write_keeps_the_output_exactly_once(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    source, out, markers = _topics_and_markers(spark, bs, tmp_path)
    # the open transaction outlives the restart (a slow restart that the broker's transaction timeout cuts short
    # fails the task with TransactionTimeoutError instead, which the branch below accepts too)
    sink = {"topic": out, "transactionalIdPrefix": unique("restart"), "kafka.transaction.timeout.ms": "120000",
            "requestTimeoutMs": "5000"}
    query = _start(spark, bs, source, PAUSING_FORMAT, tmp_path / "ckpt", markers=str(markers), **sink)
    failure = None
    try:
        _wait_until_paused_halfway(query, bs, out, markers)
        kafka_broker.stop_node(0, kill=True)
        kafka_broker.start_node(0)
        (markers / "resume").write_text("go")
        try:
            query.awaitTermination(240)
        except Exception as exc:  # noqa: BLE001 - py4j/pyspark wrappers: checked below
            failure = str(exc)
    finally:
        (markers / "resume").write_text("go")
        query.stop()
    if failure is None:
        print("the query rode the restart out")
    else:
        # a clear error of ours naming what failed; the query goes on from its checkpoint
        ours = re.search(rf"\b({'|'.join(kafka_connector_errors.__all__)}): ", failure)
        assert ours and (bs in failure or out in failure), failure[-3000:]
        print(f"the first run failed with {ours.group(1)}; restarted on its checkpoint")
        rerun = _start(spark, bs, source, PAUSING_FORMAT, tmp_path / "ckpt", markers=str(markers), **sink)
        try:
            rerun.awaitTermination(240)
        finally:
            rerun.stop()
    assert (tmp_path / "ckpt" / "commits" / "1").exists()  # the batch after the restart too
    values = sorted(v.decode() for _, _, v, _ in read_committed(bs, out))
    assert values == sorted(f"out-{i}" for i in range(RECORDS))


def test_a_query_stopped_mid_write_leaves_the_transaction_open_and_invisible_until_the_restart_replays_it(
        spark, kafka_broker, tmp_path):
    """Spark kills the paused task's Python worker, so neither the task nor the driver's abort (which only logs;
    Spark may log that it "failed to abort") can end the transaction: it stays open until the restarted query's
    replay of the batch fences the transactional id, long before ``kafka.transaction.timeout.ms``."""
    bs = kafka_broker.bootstrap
    source, out, markers = _topics_and_markers(spark, bs, tmp_path)
    sink = {"topic": out, "transactionalIdPrefix": unique("stopped"), "kafka.transaction.timeout.ms": "600000"}
    query = _start(spark, bs, source, PAUSING_FORMAT, tmp_path / "ckpt", markers=str(markers), **sink)
    try:
        produced = _wait_until_paused_halfway(query, bs, out, markers)
    finally:
        query.stop()
    assert not (tmp_path / "ckpt" / "commits" / "0").exists()
    assert not produced & {v.decode() for _, _, v, _ in read_committed(bs, out)}, "the open transaction is invisible"

    rerun = _start(spark, bs, source, PAUSING_FORMAT, tmp_path / "ckpt", markers=str(markers), **sink)
    try:
        rerun.awaitTermination(240)
    finally:
        (markers / "resume").write_text("go")  # a worker of the stopped query still paused would now be fenced
        rerun.stop()
    assert rerun.exception() is None, rerun.exception()
    # read_committed stops at an open transaction: every record visible means the replay ended it, well within
    # the 10-minute timeout
    values = sorted(v.decode() for _, _, v, _ in read_committed(bs, out))
    assert values == sorted(f"out-{i}" for i in range(RECORDS))
