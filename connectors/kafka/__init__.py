"""Kafka source for PySpark Structured Streaming with checkpoint-driven consumer-group offset commits.

Quick start::

    from connectors.kafka import KafkaSource, attach_commit_listener
    spark.dataSource.register(KafkaSource)
    opts = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "events", "group.id": "my-job",
            "startingOffsets": "group"}
    df = spark.readStream.format("keyedstate-kafka").options(**opts).load()
    query = df.writeStream.option("checkpointLocation", "/tmp/ckpt").foreachBatch(handle).start()
    attach_commit_listener(spark, query, opts, "/tmp/ckpt")   # also commit the last batch before a stop

See ``docs/kafka.md`` for options, commit semantics and failure behaviour.
"""

from __future__ import annotations

from connectors.kafka.committer import CheckpointOffsetCommitter
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
    UnknownTopicError,
)
from connectors.kafka.listener import KafkaOffsetCommitListener, attach_commit_listener
from connectors.kafka.options import KafkaOptions, parse_options
from connectors.kafka.source import FORMAT_NAME, SCHEMA, KafkaSource, KafkaStreamReader

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
]
