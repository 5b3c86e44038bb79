"""Connectors that bring external systems into keyedstate's checkpoint protocol.

Currently: :mod:`connectors.kafka`, a PySpark streaming data source for Apache Kafka that commits consumer-group
offsets only after Spark has committed the micro-batch that covers them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "FORMAT_NAME",
    "CheckpointOffsetCommitter",
    "KafkaOffsetCommitListener",
    "KafkaSource",
    "attach_commit_listener",
]

if TYPE_CHECKING:
    from connectors.kafka import (
        FORMAT_NAME,
        CheckpointOffsetCommitter,
        KafkaOffsetCommitListener,
        KafkaSource,
        attach_commit_listener,
    )


def __getattr__(name: str) -> Any:
    # Lazy (PEP 562): Spark's Python workers unpickle KafkaSource by reference, which imports this package first;
    # each of those short-lived processes should pay only for the modules it uses.
    if name in __all__:
        return getattr(importlib.import_module("connectors.kafka"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
