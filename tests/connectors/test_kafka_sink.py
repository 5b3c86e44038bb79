"""The ``keyedstate-kafka`` sink in a real Spark query against a real broker: both delivery guarantees, the input
columns of Spark's Kafka sink, and failures that name their cause."""

from __future__ import annotations

import pytest

from connectors.kafka import FORMAT_NAME
from kafka_helpers import committed_offsets, create_topic, produce, read_committed, unique

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _input(spark, bootstrap: str, topic: str):
    return (spark.readStream.format(FORMAT_NAME)
            .options(**{"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                        "commitOffsets": "false", "maxOffsetsPerTrigger": "120"}).load())


def _run(df, checkpoint, **options: str) -> str:
    """Run the query to the end (Trigger.AvailableNow); return its id."""
    query = (df.writeStream.format(FORMAT_NAME).options(**options).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)  # raises the query's failure
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark wrappers: keep only the message
        raise RuntimeError(str(exc)) from None
    finally:
        query.stop()
    return query.id


def test_exactly_once_writes_each_row_once_with_keys_and_headers_and_records_progress(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    source, out = create_topic(bs, 2), create_topic(bs, 3)
    produce(bs, source, 300, 2, headers=True)
    prefix = unique("alerts")
    query_id = _run(_input(spark, bs, source).selectExpr("key", "concat('out-', cast(value as string)) as value",
                                                         "headers"),
         tmp_path / "ckpt", **{"kafka.bootstrap.servers": bs, "topic": out, "transactionalIdPrefix": prefix})

    records = read_committed(bs, out)
    assert sorted(v.decode() for _, _, v, _ in records) == sorted(f"out-{i}" for i in range(300))
    for _, key, value, headers in records:
        i = value.decode()[len("out-"):]
        assert key == i.encode() and headers == [("h", i.encode())]
    # murmur2 partitioning of the key, as Java clients and Spark's built-in sink do: a key sticks to one partition
    partition_of = {}
    for p, key, _, _ in records:
        assert partition_of.setdefault(key, p) == p
    # each write partition's progress marker (one group per partition, on partition 0 of the topic) says it wrote
    # batches 0-2 (300 records, 120 per trigger)
    for write_partition in (0, 1):
        assert committed_offsets(bs, f"{prefix}-{query_id}-{write_partition}", out, 1) == {0: 3}


def test_at_least_once_writes_to_the_topic_and_partition_columns(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    source, first, second = create_topic(bs, 2), create_topic(bs, 2), create_topic(bs, 2)
    produce(bs, source, 100, 2)
    rows = _input(spark, bs, source).selectExpr(
        "value", f"if(cast(cast(value as string) as int) % 2 = 0, '{first}', '{second}') as topic",
        "cast(1 as int) as partition")
    _run(rows, tmp_path / "ckpt", **{"kafka.bootstrap.servers": bs, "deliveryGuarantee": "at_least_once"})
    evens, odds = read_committed(bs, first), read_committed(bs, second)
    assert sorted(int(v) for _, _, v, _ in evens) == list(range(0, 100, 2))
    assert sorted(int(v) for _, _, v, _ in odds) == list(range(1, 100, 2))
    assert {p for p, _, _, _ in evens + odds} == {1}


@pytest.mark.parametrize("columns,options,match", [
    (["value"], {"topic": "t"}, "needs option transactionalIdPrefix"),
    (["value"], {"topic": "t", "transactionalIdPrefix": "p", "startingOffsets": "earliest"},
     "unknown option.*startingoffsets"),
    (["key"], {"topic": "t", "transactionalIdPrefix": "p"}, "needs a column named 'value'"),
])
def test_bad_options_and_columns_stop_the_query_before_its_first_batch(spark, kafka_broker, tmp_path, columns, options,
                                                                         match):
    bs = kafka_broker.bootstrap
    source = create_topic(bs, 1)
    produce(bs, source, 3, 1)
    with pytest.raises(RuntimeError, match=f"KafkaConfigurationError: .*{match}"):
        _run(_input(spark, bs, source).select(*columns), tmp_path / "ckpt",
             **{"kafka.bootstrap.servers": bs, **options})
    assert not (tmp_path / "ckpt" / "commits" / "0").exists()


def test_a_missing_topic_fails_the_query_with_unknown_topic_error(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    source = create_topic(bs, 1)
    produce(bs, source, 5, 1)
    missing = unique("missing")
    with pytest.raises(RuntimeError, match=f"UnknownTopicError: topic '{missing}' does not exist"):
        _run(_input(spark, bs, source).selectExpr("value"), tmp_path / "ckpt",
             **{"kafka.bootstrap.servers": bs, "topic": missing, "transactionalIdPrefix": unique("p"),
                "brokerRetryTimeoutMs": "2000"})


def test_a_record_above_the_size_limit_fails_with_record_too_large_and_nothing_is_visible(spark, kafka_broker,
                                                                                           tmp_path):
    bs = kafka_broker.bootstrap
    source, out = create_topic(bs, 1), create_topic(bs, 1)
    produce(bs, source, 20, 1)
    big = _input(spark, bs, source).selectExpr(
        "if(cast(cast(value as string) as int) = 7, repeat('x', 20000), cast(value as string)) as value")
    with pytest.raises(RuntimeError, match="RecordTooLargeError: .*kafka.message.max.bytes"):
        _run(big, tmp_path / "ckpt", **{"kafka.bootstrap.servers": bs, "topic": out,
                                        "transactionalIdPrefix": unique("p"), "kafka.message.max.bytes": "10000"})
    assert read_committed(bs, out) == []  # the batch's transaction was aborted: none of its records is visible


def test_batch_writes_outside_a_streaming_query_work_at_least_once_and_refuse_exactly_once(spark, kafka_broker):
    bs = kafka_broker.bootstrap
    out = create_topic(bs, 1)
    rows = spark.createDataFrame([("k", "v1"), ("k", "v2")], "key string, value string")
    rows.write.format(FORMAT_NAME).options(**{"kafka.bootstrap.servers": bs, "topic": out,
                                              "deliveryGuarantee": "at_least_once"}).mode("append").save()
    assert sorted(v for _, _, v, _ in read_committed(bs, out)) == [b"v1", b"v2"]
    with pytest.raises(Exception, match="exactly_once needs a streaming query's batch id"):
        rows.write.format(FORMAT_NAME).options(**{"kafka.bootstrap.servers": bs, "topic": out,
                                                  "transactionalIdPrefix": unique("p")}).mode("append").save()
