"""Exceptions raised by the Kafka connector. All derive from :class:`keyedstate.errors.KeyedStateError`.

Messages name the brokers, the topic and the option to change. confluent-kafka errors are translated into these in
exactly one place: :mod:`connectors.kafka.error_codes`.
"""

from __future__ import annotations

from keyedstate.errors import ConfigurationError, KeyedStateError

__all__ = [
    "KafkaConnectorError",
    "KafkaConfigurationError",
    "MissingGroupIdError",
    "UnknownTopicError",
    "BrokersUnavailableError",
    "KafkaDataLossError",
    "OffsetOutOfRangeError",
    "NoOffsetForTimestampError",
    "NoCommittedOffsetError",
    "KafkaRequestError",
    "ProducerFencedError",
    "RecordTooLargeError",
    "TransactionTimeoutError",
]


class KafkaConnectorError(KeyedStateError):
    """Base class of every error raised by :mod:`connectors.kafka`."""


class KafkaConfigurationError(KafkaConnectorError, ConfigurationError):
    """A source or sink option (or a combination of options, or the sink's input columns) is invalid."""


class MissingGroupIdError(KafkaConfigurationError):
    """Offset commits are on (the default) but no ``group.id`` option was given."""


class UnknownTopicError(KafkaConnectorError):
    """A subscribed, assigned or written topic does not exist on the cluster (or was deleted while the query ran)."""


class BrokersUnavailableError(KafkaConnectorError):
    """No broker answered within the retry budget (option ``brokerRetryTimeoutMs``)."""


class KafkaDataLossError(KafkaConnectorError):
    """Offsets the query still needs are gone (retention, topic recreated, partitions removed).

    Raised only with ``failOnDataLoss=true`` (the default), like Spark's Kafka source.
    """


class OffsetOutOfRangeError(KafkaDataLossError):
    """A requested start offset (explicit JSON, checkpoint or committed group offset) is outside the partition's
    available range [earliest, latest]."""


class NoOffsetForTimestampError(KafkaConnectorError):
    """``startingTimestamp``/``startingOffsetsByTimestamp`` matched no record and the strategy is ``error``."""


class NoCommittedOffsetError(KafkaConnectorError):
    """``startingOffsets=group`` with ``groupOffsetReset=none`` and the group has no committed offset."""


class KafkaRequestError(KafkaConnectorError):
    """Any other error a Kafka request returned; the message carries librdkafka's error name."""


class ProducerFencedError(KafkaConnectorError):
    """The sink's transactional producer was fenced: another producer started with the same ``transactional.id``.

    Expected for a superseded attempt of a Spark task (a retry or speculative copy took over); otherwise two
    queries share one ``transactionalIdPrefix``.
    """


class RecordTooLargeError(KafkaConnectorError):
    """A record is larger than the producer's ``message.max.bytes`` or the topic's ``max.message.bytes``."""


class TransactionTimeoutError(KafkaConnectorError):
    """A sink transaction ran longer than ``transaction.timeout.ms`` and the broker aborted it, or the timeout is
    outside what the broker accepts (``transaction.max.timeout.ms``)."""
