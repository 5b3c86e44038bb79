"""What a user's process receives when the Kafka source or sink refuses its options: Spark raises its own exception
class (the check runs in a Python process the driver JVM starts), and ``keyedstate.errors.unwrapped`` /
``unwrap`` give back ours, as docs/kafka.md ("Catching the connector's errors") shows."""

from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException

from connectors.kafka import FORMAT_NAME, KafkaConfigurationError, MissingGroupIdError, parse_options
from kafka_helpers import create_topic, unique
from keyedstate.errors import KeyedStateError, unwrap, unwrapped

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="hunter2";'


def test_load_raises_sparks_analysis_exception_and_unwrapped_turns_it_into_ours(spark, kafka_broker):
    opts = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "subscribe": "t", "commitOffsets": "false",
            "kafka.sasl.jaas.config": JAAS}
    with pytest.raises(AnalysisException) as wrapped:
        spark.readStream.format(FORMAT_NAME).options(**opts).load()
    assert ("connectors.kafka.errors.KafkaConfigurationError: option kafka.sasl.jaas.config="
            "'*********(redacted)'") in str(wrapped.value)
    assert "hunter2" not in str(wrapped.value)

    with pytest.raises(KafkaConfigurationError) as ours:
        with unwrapped():
            spark.readStream.format(FORMAT_NAME).options(**opts).load()
    assert str(ours.value).startswith("option kafka.sasl.jaas.config='*********(redacted)' is Java client syntax")
    assert str(ours.value).endswith("kafka.security.protocol=SASL_SSL (or SASL_PLAINTEXT)")
    assert isinstance(ours.value.__cause__, AnalysisException)

    # the same check in the user's process raises ours without Spark
    with pytest.raises(KafkaConfigurationError, match=r"kafka.sasl.jaas.config='\*{9}\(redacted\)'"):
        parse_options(opts)


def test_a_subclass_comes_back_as_itself(spark, kafka_broker):
    with pytest.raises(MissingGroupIdError, match="option group.id is not set"):
        with unwrapped():
            spark.readStream.format(FORMAT_NAME).options(
                **{"kafka.bootstrap.servers": kafka_broker.bootstrap, "subscribe": "t"}).load()


def test_bad_sink_options_fail_the_query_with_a_streaming_query_exception_that_unwraps_to_ours(spark, kafka_broker,
                                                                                             tmp_path):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    source = spark.readStream.format(FORMAT_NAME).options(
        **{"kafka.bootstrap.servers": bs, "subscribe": topic, "commitOffsets": "false"}).load()
    query = (source.writeStream.format(FORMAT_NAME)
             .options(**{"kafka.bootstrap.servers": bs, "topic": topic, "deliveryGuarantee": "at_least_once",
                         "kafka.sasl.jaas.config": JAAS})
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        with pytest.raises(StreamingQueryException) as wrapped:
            query.awaitTermination(180)
    finally:
        query.stop()
    error = unwrap(wrapped.value)
    assert type(error) is KafkaConfigurationError and "kafka.sasl.mechanism=PLAIN," in str(error)
    assert "hunter2" not in str(wrapped.value)
    assert type(unwrap(query.exception())) is KafkaConfigurationError


def test_unwrap_leaves_errors_that_are_not_ours_alone(spark):
    missing = unique("no-such-table")
    with pytest.raises(AnalysisException) as other:
        with unwrapped():
            spark.table(missing)
    assert unwrap(other.value) is None
    assert unwrap(KafkaConfigurationError("x")) is not None and issubclass(KafkaConfigurationError, KeyedStateError)
