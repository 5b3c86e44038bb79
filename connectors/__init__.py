"""Connectors that bring external systems into keyedstate's checkpoint protocol.

Currently: :mod:`connectors.kafka`, a PySpark streaming data source for Apache Kafka that commits consumer-group
offsets only after Spark has committed the micro-batch that covers them.
"""

from __future__ import annotations

from connectors.kafka import (
    FORMAT_NAME,
    CheckpointOffsetCommitter,
    KafkaOffsetCommitListener,
    KafkaSource,
    attach_commit_listener,
)

__all__ = [
    "FORMAT_NAME",
    "CheckpointOffsetCommitter",
    "KafkaOffsetCommitListener",
    "KafkaSource",
    "attach_commit_listener",
]
