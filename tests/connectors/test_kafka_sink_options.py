"""Sink option parsing (connectors/kafka/sink_options.py) and input-column validation: pure logic, no broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructType

from connectors.kafka.errors import KafkaConfigurationError
from connectors.kafka.sink_options import IN_FLIGHT_ALIASES, parse_sink_options
from connectors.kafka.sink_records import validate_input_schema

BASE = {"kafka.bootstrap.servers": "h1:9092", "topic": "out", "transactionalIdPrefix": "alerts-v1"}


def test_exactly_once_is_the_default_and_kafka_properties_pass_through():
    opts = parse_sink_options({**BASE, "Kafka.Compression.Type": "lz4", "DELIVERYGUARANTEE": "exactly_once"})
    assert opts.exactly_once and opts.progress_topic == "out"
    conf = opts.producer_config(opts.transactional_id("query-id", 3))
    assert conf["transactional.id"] == "alerts-v1-query-id-3"
    assert conf["compression.type"] == "lz4"
    assert conf["partitioner"] == "murmur2_random"  # Java's (and Spark's built-in sink's) key partitioning
    assert conf["transaction.timeout.ms"] == "60000"
    assert conf["message.timeout.ms"] == "60000"  # brokerRetryTimeoutMs (120 s), capped by the transaction timeout


def test_at_least_once_needs_no_prefix_and_uses_the_retry_budget_as_delivery_timeout():
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "out", "deliveryGuarantee": "at_least_once",
                               "brokerRetryTimeoutMs": "5000"})
    assert not opts.exactly_once
    conf = opts.producer_config()
    assert "transactional.id" not in conf and conf["message.timeout.ms"] == "5000"


def test_the_sinks_librdkafka_defaults_are_documented_and_every_one_yields_to_a_kafka_option():
    defaults = parse_sink_options(BASE).producer_config("t")
    assert (defaults["linger.ms"], defaults["enable.idempotence"], defaults["enable.sparse.connections"]) == (
        "5", "true", "false")
    opts = parse_sink_options({**BASE, "kafka.linger.ms": "50", "kafka.enable.sparse.connections": "true",
                               "kafka.partitioner": "consistent_random"})
    conf = opts.producer_config("t")
    assert (conf["linger.ms"], conf["enable.sparse.connections"], conf["partitioner"]) == (
        "50", "true", "consistent_random")
    docs = (Path(__file__).resolve().parents[2] / "docs" / "kafka.md").read_text()
    for name in ("linger.ms", "enable.idempotence", "enable.sparse.connections", "partitioner"):
        assert f"`{name}`" in docs, f"docs/kafka.md does not list the sink's default for {name}"


def test_one_request_in_flight_by_default_and_a_users_pipelining_is_kept_with_a_warning(caplog):
    # librdkafka's implicit acks lose records when a partition's first request fails and a pipelined one succeeds
    # (docs/kafka.md); the backpressure test writes to a topic created just before and checks every record arrived
    for guarantee in ({"deliveryGuarantee": "exactly_once"}, {"deliveryGuarantee": "at_least_once",
                                                             "transactionalIdPrefix": ""}):
        opts = parse_sink_options({**BASE, **guarantee})
        assert opts.producer_config("t")["max.in.flight.requests.per.connection"] == "1"
    assert not caplog.records
    for name in ("max.in.flight", "max.in.flight.requests.per.connection"):
        caplog.clear()
        with caplog.at_level("WARNING", logger="keyedstate.connectors.kafka.sink"):
            conf = parse_sink_options({**BASE, f"kafka.{name}": "5"}).producer_config("t")
        # the user's value, under its own name only: of two aliases librdkafka applies the later
        assert conf[name] == "5" and not (conf.keys() - {name}) & IN_FLIGHT_ALIASES
        assert [r.levelname for r in caplog.records] == ["WARNING"]
        assert f"kafka.{name}=5" in caplog.text and "confluent-kafka-go#921" in caplog.text
    caplog.clear()
    parse_sink_options({**BASE, "kafka.max.in.flight": "1"})
    assert not caplog.records
    docs = (Path(__file__).resolve().parents[2] / "docs" / "kafka.md").read_text()
    assert "`max.in.flight.requests.per.connection` | `1`" in docs


def test_a_delivery_timeout_given_under_its_alias_is_not_replaced_by_the_retry_budget():
    # delivery.timeout.ms is librdkafka's alias of message.timeout.ms, and of two aliases the later one applies: a
    # default message.timeout.ms added after the user's value would silently replace it
    opts = parse_sink_options({**BASE, "kafka.delivery.timeout.ms": "5000"})
    conf = opts.producer_config(opts.transactional_id("query-id", 0))
    assert conf["delivery.timeout.ms"] == "5000" and "message.timeout.ms" not in conf


def test_the_marker_consumer_gets_connection_properties_but_not_producer_ones():
    opts = parse_sink_options({**BASE, "kafka.security.protocol": "SSL", "kafka.linger.ms": "50"})
    conf = opts.marker_consumer_config("g")
    assert conf["security.protocol"] == "SSL" and "linger.ms" not in conf
    assert conf["isolation.level"] == "read_committed" and conf["group.id"] == "g"


@pytest.mark.parametrize("opts,match", [
    ({"topic": "out", "transactionalIdPrefix": "p"}, "kafka.bootstrap.servers is required"),
    ({**BASE, "subscribe": "x"}, "unknown option.*subscribe"),
    ({**BASE, "deliveryGuarantee": "maybe"}, "deliveryGuarantee='maybe'"),
    ({"kafka.bootstrap.servers": "h:1", "topic": "out"}, "needs option transactionalIdPrefix"),
    ({**BASE, "transactionalIdPrefix": "has space"}, "transactionalIdPrefix='has space'"),
    ({**BASE, "kafka.transactional.id": "x"}, "kafka.transactional.id cannot be set"),
    ({**BASE, "kafka.enable.idempotence": "false"}, "enable.idempotence=false contradicts"),
    ({"kafka.bootstrap.servers": "h:1", "transactionalIdPrefix": "p"}, "needs option progressTopic"),
    ({**BASE, "kafka.transaction.timeout.ms": "10"}, "transaction.timeout.ms=10 must be >= 1000"),
    ({**BASE, "kafka.transaction.timeout.ms": "10000", "kafka.message.timeout.ms": "20000"},
     "message.timeout.ms=20000 exceeds kafka.transaction.timeout.ms=10000"),
    ({"kafka.bootstrap.servers": "h:1", "topic": "o", "deliveryGuarantee": "at_least_once",
      "transactionalIdPrefix": "p"}, "only apply to deliveryGuarantee=exactly_once"),
    ({**BASE, "brokerRetryTimeoutMs": "soon"}, "brokerRetryTimeoutMs='soon' is not an integer"),
])
def test_invalid_options_name_the_option(opts, match):
    with pytest.raises(KafkaConfigurationError, match=match):
        parse_sink_options(opts)


@pytest.mark.parametrize("schema,topic,match", [
    (StructType().add("key", StringType()), "out", "needs a column named 'value'"),
    (StructType().add("value", LongType()), "out", "'value' must be binary or string, not bigint"),
    (StructType().add("value", StringType()), None, "needs option topic or a column named 'topic'"),
    (StructType().add("value", BinaryType()).add("partition", LongType()), "out", "'partition' must be an int"),
    (StructType().add("value", BinaryType()).add("headers", StringType()), "out", "'headers' must be array"),
])
def test_input_columns_follow_spark_kafka_sink_rules(schema, topic, match):
    with pytest.raises(KafkaConfigurationError, match=match):
        validate_input_schema(schema, topic)


def test_valid_input_columns_pass_and_extra_columns_are_ignored():
    validate_input_schema(StructType().add("value", StringType()).add("key", BinaryType())
                          .add("topic", StringType()).add("partition", IntegerType()).add("other", LongType()), None)
