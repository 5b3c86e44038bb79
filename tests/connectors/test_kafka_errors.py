"""Bad input and lost data produce specific, actionable errors (real broker)."""

from __future__ import annotations

import pytest

from connectors.kafka import (
    FORMAT_NAME,
    BrokersUnavailableError,
    KafkaDataLossError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from connectors.kafka.fetch import KafkaInputPartition, read_range
from connectors.kafka.source import KafkaStreamReader
from connectors.kafka.source_options import parse_options
from kafka_helpers import create_topic, produce, unique, wait_for

pytestmark = pytest.mark.kafka


def reader(bs: str, **opts) -> KafkaStreamReader:
    return KafkaStreamReader(parse_options({"kafka.bootstrap.servers": bs, "commitOffsets": "false", **opts}))


def test_unknown_topic_names_topic_brokers_and_option(kafka_broker):
    bs = kafka_broker.bootstrap
    missing = unique("nope")
    with pytest.raises(UnknownTopicError) as e:
        reader(bs, subscribe=missing).initialOffset()
    msg = str(e.value)
    assert missing in msg and bs in msg and "subscribe" in msg
    with pytest.raises(UnknownTopicError, match="assign"):
        reader(bs, assign=f'{{"{missing}": [0]}}').initialOffset()


def test_assigned_partition_that_does_not_exist(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    with pytest.raises(UnknownTopicError, match=r"no partition\(s\) \[3\]"):
        reader(bs, assign=f'{{"{topic}": [0, 3]}}').initialOffset()


def test_unreachable_bootstrap_servers_fail_after_the_retry_budget():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens once the socket is closed
    r = reader(dead, subscribe="t", brokerRetryTimeoutMs="1500", requestTimeoutMs="500", retryBackoffMs="200")
    with pytest.raises(BrokersUnavailableError) as e:
        r.initialOffset()
    msg = str(e.value)
    assert dead in msg and "'t'" in msg and "brokerRetryTimeoutMs=1500" in msg and "raise option" in msg


@pytest.mark.spark
def test_errors_reach_the_user_through_spark(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    # commits on (the default) without group.id: rejected when the query is defined
    with pytest.raises(Exception, match="MissingGroupIdError") as e:
        spark.readStream.format(FORMAT_NAME).options(**{"kafka.bootstrap.servers": bs, "subscribe": "t"}).load()
    assert "group.id" in str(e.value)
    # unknown topic: the query fails with our error
    missing = unique("nope")
    q = (spark.readStream.format(FORMAT_NAME)
         .options(**{"kafka.bootstrap.servers": bs, "subscribe": missing, "commitOffsets": "false"}).load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start())
    with pytest.raises(Exception, match="UnknownTopicError") as e:
        q.awaitTermination(120)
    assert missing in str(e.value)


def test_offsets_deleted_by_retention_fail_the_read_or_are_skipped(kafka_broker):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    produce(bs, topic, 10, 1)
    admin = AdminClient({"bootstrap.servers": bs})
    admin.delete_records([TopicPartition(topic, 0, 5)], request_timeout=30)[TopicPartition(topic, 0, 5)].result(30)
    part = KafkaInputPartition(topic, 0, 0, 10)  # planned before the records were deleted
    strict = parse_options({"kafka.bootstrap.servers": bs, "subscribe": topic, "commitOffsets": "false"})
    with pytest.raises(OffsetOutOfRangeError) as e:
        list(read_range(strict, part))
    assert topic in str(e.value) and "failOnDataLoss=false" in str(e.value)
    lenient = parse_options({"kafka.bootstrap.servers": bs, "subscribe": topic, "commitOffsets": "false",
                             "failOnDataLoss": "false"})
    offsets = [o for b in read_range(lenient, part) for o in b.column("offset").to_pylist()]
    assert offsets == [5, 6, 7, 8, 9]


def test_topic_deleted_while_running(kafka_broker):
    from confluent_kafka.admin import AdminClient

    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    produce(bs, topic, 4, 2)
    strict = reader(bs, subscribe=topic, startingOffsets="earliest")
    start = strict.initialOffset()
    admin = AdminClient({"bootstrap.servers": bs})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 30, "topic deletion")
    with pytest.raises(KafkaDataLossError) as e:
        strict.latestOffset(start, _all())
    assert topic in str(e.value) and "failOnDataLoss=false" in str(e.value)
    lenient = reader(bs, subscribe=topic, startingOffsets="earliest", failOnDataLoss="false")
    assert lenient.latestOffset(start, _all()) == {}


def _all():
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    return ReadAllAvailable()


@pytest.mark.parametrize("protocol, evidence", [
    ("SASL_PLAINTEXT", "Request not valid in current SASL state"),
    ("SSL", "connecting to a PLAINTEXT broker listener?"),
])
def test_a_security_protocol_the_listener_does_not_speak_is_named_as_the_likely_cause(kafka_broker, protocol,
                                                                                       evidence):
    bs = kafka_broker.bootstrap  # the fixture's listener is PLAINTEXT
    sasl = {"kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "u", "kafka.sasl.password": "p"}
    r = reader(bs, subscribe="t", brokerRetryTimeoutMs="1500", requestTimeoutMs="500", retryBackoffMs="200",
               **{"kafka.security.protocol": protocol, **(sasl if protocol.startswith("SASL") else {})})
    with pytest.raises(BrokersUnavailableError) as e:
        r.initialOffset()
    msg = str(e.value)
    assert "brokerRetryTimeoutMs=1500" in msg
    assert f"The listener at {bs} refused kafka.security.protocol={protocol} and looks like a PLAINTEXT listener" in msg
    assert evidence in msg and "set kafka.security.protocol to the protocol of the listener" in msg
    assert "kafka.sasl.password" not in msg and "'p'" not in msg


def test_the_fetch_of_an_executor_names_the_protocol_mismatch_too(kafka_broker):
    bs = kafka_broker.bootstrap
    opts = parse_options({"kafka.bootstrap.servers": bs, "subscribe": "t", "commitOffsets": "false",
                          "brokerRetryTimeoutMs": "1500", "retryBackoffMs": "200",
                          "kafka.security.protocol": "SSL"})
    with pytest.raises(BrokersUnavailableError) as e:
        list(read_range(opts, KafkaInputPartition("t", 0, 0, 10)))
    msg = str(e.value)
    assert "brokerRetryTimeoutMs=1500" in msg and "connecting to a PLAINTEXT broker listener?" in msg
    assert f"The listener at {bs} refused kafka.security.protocol=SSL and looks like a PLAINTEXT listener" in msg


def test_protocol_hints_follow_librdkafkas_words_and_stay_quiet_for_a_plain_outage():
    from connectors.kafka.error_codes import listener_hint

    # what librdkafka reports when a PLAINTEXT client reaches an SSL listener (rdkafka_broker.c)
    apiversion = ("Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol "
                  "configuration (connecting to a SSL listener?) or broker version is < 0.10")
    hint = listener_hint(None, "b:9093", ["1/1 brokers are down", apiversion])
    assert "as an SSL or SASL listener does" in hint and "set kafka.security.protocol (SSL, SASL_SSL" in hint
    assert listener_hint("PLAINTEXT", "b:9092", ["Connection refused"]) == ""
    unproven = listener_hint("sasl_ssl", "b:9092", ["Connection refused"])
    assert "kafka.security.protocol=SASL_SSL may not match the listener at b:9092" in unproven


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_sink_task_names_a_possible_protocol_mismatch(kafka_broker, guarantee):
    import pyarrow as pa

    from connectors.kafka.sink_options import parse_sink_options
    from connectors.kafka.sink_writer import SinkTask, write_task

    bs = kafka_broker.bootstrap
    opts = parse_sink_options({
        "kafka.bootstrap.servers": bs, "topic": "t", "deliveryGuarantee": guarantee, "brokerRetryTimeoutMs": "1500",
        "requestTimeoutMs": "500", "retryBackoffMs": "200", "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "u", "kafka.sasl.password": "p",
        **({"transactionalIdPrefix": unique("txn")} if guarantee == "exactly_once" else {})})
    rows = iter([pa.record_batch({"value": pa.array(["a"], pa.string())})])
    with pytest.raises(BrokersUnavailableError) as e:
        write_task(opts, rows, SinkTask("q", batch_id=0, partition_id=0))
    assert f"kafka.security.protocol=SASL_PLAINTEXT may not match the listener at {bs}" in str(e.value)
