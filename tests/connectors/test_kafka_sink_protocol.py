"""The sink's per-task exactly-once protocol against a real broker, without Spark: replays, zombie attempts and
transactions left open by crashed attempts (connectors/kafka/sink_writer.py)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from connectors.kafka.errors import (
    ProducerFencedError,
    RecordTooLargeError,
    TransactionTimeoutError,
    UnknownTopicError,
)
from connectors.kafka.sink_options import parse_sink_options
from connectors.kafka.sink_writer import SinkTask, write_task
from kafka_helpers import create_topic, read_committed, unique

pytestmark = [pytest.mark.kafka]


def _rows(values: list[str]) -> list[pa.RecordBatch]:
    return [pa.record_batch({"key": pa.array([v.encode() for v in values], pa.binary()),
                             "value": pa.array(values, pa.string())})]


def _options(bootstrap: str, topic: str, **extra: str):
    return parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                               "transactionalIdPrefix": unique("txn"), "brokerRetryTimeoutMs": "10000", **extra})


def _values(bootstrap: str, topic: str) -> list[str]:
    return sorted(v.decode() for _, _, v, _ in read_committed(bootstrap, topic))


def test_a_replayed_batch_writes_nothing_and_the_next_batch_writes(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    opts = _options(bs, topic)
    first = write_task(opts, iter(_rows(["a", "b", "c"])), SinkTask("q", batch_id=0, partition_id=0))
    assert (first.records, first.already_written) == (3, False)

    consumed = []

    def replay():
        for batch in _rows(["a", "b", "c"]):
            consumed.append(batch.num_rows)
            yield batch

    again = write_task(opts, replay(), SinkTask("q", batch_id=0, partition_id=0, attempt=1))
    assert (again.records, again.already_written) == (0, True)
    assert consumed == [3], "a skipped replay still consumes its input (upstream state stores commit at its end)"
    other_partition = write_task(opts, iter(_rows(["x"])), SinkTask("q", batch_id=0, partition_id=1))
    assert other_partition.records == 1
    assert write_task(opts, iter(_rows(["d"])), SinkTask("q", batch_id=1, partition_id=0)).records == 1
    assert _values(bs, topic) == ["a", "b", "c", "d", "x"]


def test_progress_is_per_query_so_a_new_checkpoint_with_the_same_prefix_writes_again(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    opts = _options(bs, topic)
    write_task(opts, iter(_rows(["old"])), SinkTask("query-1", batch_id=5, partition_id=0))
    # a fresh checkpoint starts again at batch 0 under a new query id: its batches are not mistaken for replays
    assert write_task(opts, iter(_rows(["new"])), SinkTask("query-2", batch_id=0, partition_id=0)).records == 1
    assert _values(bs, topic) == ["new", "old"]


def test_a_zombie_attempt_is_fenced_and_the_batch_is_visible_once(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    opts = _options(bs, topic)
    task = SinkTask("q", batch_id=3, partition_id=0)
    zombie_started, newer_done = threading.Event(), threading.Event()

    def slow_rows():
        yield from _rows(["r1", "r2"])
        zombie_started.set()
        newer_done.wait(60)  # a speculative/older attempt still writing while the retry runs to completion
        yield from _rows(["r3"])

    outcome: dict = {}

    def zombie():
        try:
            outcome["zombie"] = write_task(opts, slow_rows(), task)
        except Exception as exc:  # noqa: BLE001 - asserted below
            outcome["zombie"] = exc

    t = threading.Thread(target=zombie)
    t.start()
    assert zombie_started.wait(60)
    newer = write_task(opts, iter(_rows(["r1", "r2", "r3"])), SinkTask("q", 3, 0, attempt=1))
    newer_done.set()
    t.join(120)
    assert newer.records == 3
    assert isinstance(outcome["zombie"], ProducerFencedError), outcome["zombie"]
    assert "transactionalIdPrefix" in str(outcome["zombie"])
    assert _values(bs, topic) == ["r1", "r2", "r3"]


def test_a_transaction_left_open_by_a_crashed_attempt_is_aborted_by_the_next_attempt(kafka_broker):
    from confluent_kafka import Producer

    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    opts = _options(bs, topic)
    task = SinkTask("q", batch_id=0, partition_id=0)
    crashed = Producer(opts.producer_config(opts.transactional_id(task.query_id, task.partition_id)))
    crashed.init_transactions(30)
    crashed.begin_transaction()
    crashed.produce(topic, b"half-written")
    crashed.flush(30)  # in the log, uncommitted: read_committed consumers stop before it

    assert write_task(opts, iter(_rows(["complete"])), SinkTask("q", 0, 0, attempt=1)).records == 1
    assert _values(bs, topic) == ["complete"]  # the reader reached the end: nothing left open


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_record_the_broker_rejects_as_too_large_fails_with_record_too_large(kafka_broker, guarantee):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1, config={"max.message.bytes": "2000"})
    extra = {"deliveryGuarantee": guarantee}
    opts = _options(bs, topic, **extra) if guarantee == "exactly_once" else parse_sink_options(
        {"kafka.bootstrap.servers": bs, "topic": topic, **extra})
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        write_task(opts, iter(_rows(["x" * 5000])), SinkTask("q", 0, 0))
    assert _values(bs, topic) == []


def test_a_transaction_timeout_above_the_brokers_limit_is_rejected_clearly(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    opts = _options(bs, topic, **{"kafka.transaction.timeout.ms": "1000000"})  # brokers allow 900000 by default
    with pytest.raises(TransactionTimeoutError, match="transaction.max.timeout.ms"):
        write_task(opts, iter(_rows(["v"])), SinkTask("q", 0, 0))


def test_a_write_outliving_the_transaction_timeout_fails_with_the_option_named(kafka_broker):
    import time

    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    opts = _options(bs, topic, **{"kafka.transaction.timeout.ms": "1000"})

    def slow_rows():
        yield from _rows(["early"])
        time.sleep(12)  # the coordinator aborts timed-out transactions on a 10 s sweep
        yield from _rows(["late"])

    with pytest.raises(TransactionTimeoutError, match="kafka.transaction.timeout.ms=1000"):
        write_task(opts, slow_rows(), SinkTask("q", 0, 0))
    assert _values(bs, topic) == []
    # the retry (a new attempt, same transactional id) writes the batch
    assert write_task(opts, iter(_rows(["early", "late"])), SinkTask("q", 0, 0, attempt=1)).records == 2
    assert _values(bs, topic) == ["early", "late"]


def test_writing_to_a_missing_topic_names_it(kafka_broker):
    bs = kafka_broker.bootstrap
    progress = create_topic(bs, 1)
    missing = unique("missing")
    opts = parse_sink_options({"kafka.bootstrap.servers": bs, "transactionalIdPrefix": unique("txn"),
                               "progressTopic": progress, "brokerRetryTimeoutMs": "2000"})
    batch = pa.record_batch({"value": pa.array([b"v"]), "topic": pa.array([missing])})
    with pytest.raises(UnknownTopicError, match=missing):
        write_task(opts, iter([batch]), SinkTask("q", 0, 0))


def test_a_broker_restart_during_a_write_leaves_the_batch_exactly_once(kafka_broker):
    """The broker is killed and restarted while a task is producing into its transaction: the task either rides it
    out or fails with one of our errors, and the retried attempt (as Spark would run it) keeps the output exactly
    once. Runs last in this module: it restarts the session's broker."""
    from connectors.kafka.errors import KafkaConnectorError

    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    opts = _options(bs, topic, brokerRetryTimeoutMs="60000", requestTimeoutMs="5000")
    values = [f"v{i}" for i in range(200)]

    def rows_with_restart():
        yield from _rows(values[:100])
        kafka_broker.stop_node(0, kill=True)
        kafka_broker.start_node(0)
        yield from _rows(values[100:])

    try:
        first = write_task(opts, rows_with_restart(), SinkTask("q", 0, 0))
        assert first.records == 200
    except KafkaConnectorError as exc:  # a clear error is acceptable; then Spark retries the task
        print(f"first attempt failed: {type(exc).__name__}: {exc}")
        write_task(opts, iter(_rows(values)), SinkTask("q", 0, 0, attempt=1))
    retried = write_task(opts, iter(_rows(values)), SinkTask("q", 0, 0, attempt=2))
    assert retried.already_written
    assert _values(bs, topic) == sorted(values)


def test_a_generic_fatal_error_is_explained_by_the_call_after_it():
    """librdkafka reports a producer fenced mid-write as _FATAL on produce(); the abort that follows names _FENCED,
    and that is the cause the sink reports (ProducerFencedError, not a generic request failure)."""
    from confluent_kafka import KafkaError, KafkaException

    from connectors.kafka import error_codes

    generic = KafkaException(KafkaError(KafkaError._FATAL, "Local: Fatal error"))
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced by newer producer instance", fatal=True))
    assert error_codes.is_generic_fatal(generic) and not error_codes.is_fenced(generic)
    assert not error_codes.is_generic_fatal(fenced) and error_codes.is_fenced(fenced)
    assert (type(error_codes.translate(fenced, brokers="b", topic="t", action="writing")).__name__
            == "ProducerFencedError")
