"""Kafka source for PySpark Structured Streaming with checkpoint-driven consumer-group offset commits, and an
exactly-once Kafka sink.

Quick start::

    from connectors.kafka import KafkaSource, attach_commit_listener
    spark.dataSource.register(KafkaSource)
    opts = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "events", "group.id": "my-job",
            "startingOffsets": "group"}
    df = spark.readStream.format("keyedstate-kafka").options(**opts).load()
    query = df.writeStream.option("checkpointLocation", "/tmp/ckpt").foreachBatch(handle).start()
    attach_commit_listener(spark, query, opts, "/tmp/ckpt")   # also commit the last batch before a stop

    # the sink: one Kafka transaction per Spark task and micro-batch
    results.writeStream.format("keyedstate-kafka").option("kafka.bootstrap.servers", "127.0.0.1:9092") \
        .option("topic", "alerts").option("transactionalIdPrefix", "alerts-v1") \
        .option("checkpointLocation", "/tmp/ckpt-out").start()

See ``docs/kafka.md`` for options, commit semantics and failure behaviour.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Where each public name lives. Imported on first access (PEP 562) because every Python process Spark starts for the
# source (planner workers, the stream-reader process, executor workers) imports this package when it unpickles
# KafkaSource, and most of them need neither the listener nor the executor-side fetch code.
_EXPORTS = {
    "CheckpointOffsetCommitter": "committer",
    "BrokersUnavailableError": "errors",
    "KafkaConfigurationError": "errors",
    "KafkaConnectorError": "errors",
    "KafkaDataLossError": "errors",
    "KafkaRequestError": "errors",
    "MissingGroupIdError": "errors",
    "NoCommittedOffsetError": "errors",
    "NoOffsetForTimestampError": "errors",
    "OffsetOutOfRangeError": "errors",
    "UnknownTopicError": "errors",
    "ProducerFencedError": "errors",
    "RecordTooLargeError": "errors",
    "TransactionTimeoutError": "errors",
    "KafkaSinkOptions": "sink_options",
    "parse_sink_options": "sink_options",
    "KafkaStreamWriter": "sink",
    "KafkaBatchWriter": "sink",
    "KafkaSinkCommitMessage": "sink_writer",
    "KafkaOffsetCommitListener": "listener",
    "attach_commit_listener": "listener",
    "KafkaOptions": "source_options",
    "parse_options": "source_options",
    "FORMAT_NAME": "source",
    "SCHEMA": "source",
    "KafkaSource": "data_source",
    "KafkaStreamReader": "source",
}

__all__ = [
    "FORMAT_NAME",
    "SCHEMA",
    "KafkaSource",
    "KafkaStreamReader",
    "KafkaOptions",
    "parse_options",
    "CheckpointOffsetCommitter",
    "KafkaOffsetCommitListener",
    "attach_commit_listener",
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
    "KafkaStreamWriter",
    "KafkaBatchWriter",
    "KafkaSinkCommitMessage",
    "KafkaSinkOptions",
    "parse_sink_options",
    "ProducerFencedError",
    "RecordTooLargeError",
    "TransactionTimeoutError",
]

if TYPE_CHECKING:
    from connectors.kafka.committer import CheckpointOffsetCommitter
    from connectors.kafka.data_source import KafkaSource
    from connectors.kafka.errors import (
        BrokersUnavailableError,
        KafkaConfigurationError,
        KafkaConnectorError,
        KafkaDataLossError,
        KafkaRequestError,
        MissingGroupIdError,
        NoCommittedOffsetError,
        NoOffsetForTimestampError,
        OffsetOutOfRangeError,
        ProducerFencedError,
        RecordTooLargeError,
        TransactionTimeoutError,
        UnknownTopicError,
    )
    from connectors.kafka.listener import KafkaOffsetCommitListener, attach_commit_listener
    from connectors.kafka.sink import KafkaBatchWriter, KafkaStreamWriter
    from connectors.kafka.sink_options import KafkaSinkOptions, parse_sink_options
    from connectors.kafka.sink_writer import KafkaSinkCommitMessage
    from connectors.kafka.source import FORMAT_NAME, SCHEMA, KafkaStreamReader
    from connectors.kafka.source_options import KafkaOptions, parse_options


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"connectors.kafka.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
