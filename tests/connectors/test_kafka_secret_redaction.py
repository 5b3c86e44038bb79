"""A kafka.* property librdkafka rejects is named, but a secret's value never appears in the error: on both of the
sink's producer paths (the bulk C path and confluent-kafka's) and in the source's client."""

from __future__ import annotations

import pytest

from connectors.kafka.bulk_producer import bulk_path_available
from connectors.kafka.client import KafkaClient
from connectors.kafka.errors import KafkaConfigurationError
from connectors.kafka.sink_options import parse_sink_options
from connectors.kafka.sink_producers import DeliveryErrors, create_producer
from connectors.kafka.source_options import parse_options
from keyedstate.redaction import REDACTED

CANARY = "canary-c4f1e8"


# KEYEDSTATE_PURE_PYTHON=1 turns the bulk path off (make test runs this module that way too); tests/connectors/
# test_kafka_bulk_producer.py asserts that the bulk path is available otherwise.
PATHS = [True, False] if bulk_path_available() else [False]


def _refusal(bulk: bool, **kafka: str) -> str:
    options = parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t",
                                  "deliveryGuarantee": "at_least_once", **{f"kafka.{k}": v for k, v in kafka.items()}})
    with pytest.raises(KafkaConfigurationError) as refused:
        create_producer(options, DeliveryErrors(), bulk)
    return str(refused.value)


@pytest.mark.parametrize("bulk", PATHS, ids=lambda bulk: "bulk" if bulk else "confluent-kafka")
def test_a_misspelled_password_property_is_named_without_its_value(bulk):
    message = _refusal(bulk, **{"ssl.key.pasword": CANARY})
    assert CANARY not in message and "ssl.key.pasword" in message


@pytest.mark.parametrize("bulk", PATHS, ids=lambda bulk: "bulk" if bulk else "confluent-kafka")
def test_librdkafka_quoting_a_secret_looking_value_is_redacted_too(bulk):
    # librdkafka's own text quotes an invalid value: "Invalid value "..." for configuration property"
    message = _refusal(bulk, **{"security.protocol": f"token-{CANARY}"})
    assert CANARY not in message and f'Invalid value "{REDACTED}"' in message


@pytest.mark.parametrize("bulk", PATHS, ids=lambda bulk: "bulk" if bulk else "confluent-kafka")
def test_a_rejected_value_that_is_no_secret_is_still_shown(bulk):
    message = _refusal(bulk, acks="maybe")
    assert "acks" in message
    if bulk:  # confluent-kafka's text names the property only; the bulk path shows the value given
        assert "kafka.acks='maybe'" in message


def test_the_sources_client_redacts_a_secret_looking_value_librdkafka_quotes():
    options = parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "commitOffsets": "false",
                             "kafka.security.protocol": f'password="{CANARY}"'})
    with pytest.raises(KafkaConfigurationError) as refused:
        KafkaClient(options)
    message = str(refused.value)
    assert CANARY not in message and "security.protocol" in message and REDACTED in message
    assert refused.value.__cause__ is None and refused.value.__suppress_context__  # librdkafka's text stays out
