"""The checkpoint listener protocol of the Kafka offset committer (Flink's ``CheckpointListener``).

A checkpoint is identified by an integer that increases with every checkpoint a participant takes part in: the
protocol relies on its order only (a completion subsumes older ids). On Spark one checkpoint is one micro-batch.
Where Spark names the batch (the query-progress listener of :mod:`connectors.kafka.listener`) the id is the batch id;
a Python streaming source is never told the batch id (``partitions(start, end)`` and ``commit(end)`` carry offsets
only), so the Kafka source numbers the batches it plans from 1 in each driver process and matches a commit to its
batch by the end offsets.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["CheckpointListener"]


@runtime_checkable
class CheckpointListener(Protocol):
    """Something that takes part in checkpoints.

    Call order for one checkpoint: ``snapshot_state(id)`` once, then exactly one of
    ``notify_checkpoint_complete(id)`` (the checkpoint is durable everywhere) or ``notify_checkpoint_aborted(id)``.
    A completion for a newer id subsumes every older pending checkpoint.
    """

    def snapshot_state(self, checkpoint_id: int) -> object:
        """Record what this participant must restore for ``checkpoint_id``; return its snapshot handle."""
        ...

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` is complete; side effects tied to it (offset commits) may now become visible."""
        ...

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` will never complete; drop what was pending for it."""
        ...
