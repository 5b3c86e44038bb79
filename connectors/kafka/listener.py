"""Listener helper: commit Kafka offsets right after each micro-batch's commit log is written.

``KafkaStreamReader.commit(end)`` only runs when the NEXT batch is planned, so the last batch before a stop (or
before a long idle period) would never be committed. :class:`KafkaOffsetCommitListener` closes that gap. It runs in
the user's driver process (``onQueryProgress`` arrives 0.1-0.8 s after the batch's commit log is written) and reads
the offsets to commit from the query's checkpoint itself: the newest batch id in ``commits/`` and that batch's line
in ``offsets/``. It never commits a batch that is not in ``commits/``, so it can never commit beyond Spark.

The checkpoint must be on a local (or locally mounted) filesystem: a plain path or a ``file:`` URI.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Mapping, Optional
from urllib.parse import urlparse

from pyspark.sql.streaming import StreamingQueryListener

from connectors.kafka.committer import CheckpointOffsetCommitter
from connectors.kafka.errors import KafkaConfigurationError
from connectors.kafka.offsets import TP, fmt_offsets, from_offset_json, offsets_of_sources
from connectors.kafka.source_options import KafkaOptions, parse_options

if TYPE_CHECKING:
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
    )

__all__ = ["KafkaOffsetCommitListener", "attach_commit_listener", "latest_committed_batch", "batch_end_offsets"]

log = logging.getLogger("keyedstate.connectors.kafka.listener")


def _local_dir(checkpoint_location: str) -> str:
    u = urlparse(checkpoint_location)
    if u.scheme in ("", "file"):
        return u.path if u.scheme else checkpoint_location
    raise KafkaConfigurationError(
        f"checkpoint location {checkpoint_location!r} is not on a local filesystem; the commit listener reads the "
        "checkpoint's offsets/ and commits/ logs directly (use a local or mounted path)")


def latest_committed_batch(checkpoint_location: str) -> Optional[int]:
    """The newest batch id in the checkpoint's ``commits/`` log (None if no batch committed yet)."""
    try:
        names = os.listdir(os.path.join(_local_dir(checkpoint_location), "commits"))
    except FileNotFoundError:
        return None
    return max((int(n) for n in names if n.isdigit()), default=None)


def batch_end_offsets(checkpoint_location: str, batch_id: int, opts: KafkaOptions,
                      source_index: Optional[int] = None) -> dict[TP, int]:
    """End offsets (next offset to read) of our source in batch ``batch_id``, from the ``offsets/`` log."""
    path = os.path.join(_local_dir(checkpoint_location), "offsets", str(batch_id))
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    sources = lines[2:]  # "v1", batch metadata, then one line per source ("-" when a source has no offset)
    parsed = [_json_or_none(line) for line in sources]
    if source_index is not None:
        return from_offset_json(parsed[source_index])
    found = offsets_of_sources(parsed, None, opts.reads_topic)
    if len(found) > 1:
        raise KafkaConfigurationError(
            f"batch {batch_id} of checkpoint {checkpoint_location} has {len(found)} Kafka sources reading these "
            "topics; pass source_index= (the source's position in the query) to the commit listener")
    return found[0] if found else {}


def _json_or_none(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:  # "-": a source without offsets in this batch
        return None


class KafkaOffsetCommitListener(StreamingQueryListener):
    """Commits the newest batch in the checkpoint's commit log after every progress event and at termination.

    Checkpoint ids are Spark batch ids. Use :func:`attach_commit_listener` to create and register one.
    """

    def __init__(self, options: Mapping[str, str], checkpoint_location: str, query_id: Optional[str] = None,
                 source_index: Optional[int] = None) -> None:
        self.opts = parse_options(dict(options))
        if not self.opts.group_id:
            raise KafkaConfigurationError("the commit listener needs option group.id")
        self.checkpoint_location = checkpoint_location
        _local_dir(checkpoint_location)
        self.query_id = query_id
        self.source_index = source_index
        from connectors.kafka.client import KafkaClient

        self._client = KafkaClient(self.opts)
        self.committer = CheckpointOffsetCommitter(self._client.async_commit_function(self.opts.group_id),
                                                   name=f"listener group {self.opts.group_id!r}")
        self._lock = threading.Lock()

    # -- StreamingQueryListener (user's driver process, Spark's listener thread) -------------------------------
    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        """Runs 0.1-0.8 s after a batch's commit log is written."""
        if self._mine(str(event.progress.id)):
            self.commit_latest()

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        """After the query stopped: commit the last batch Spark committed (the reader never will)."""
        if self._mine(str(event.id)):
            self.commit_latest()

    def commit_latest(self) -> Optional[int]:
        """Commit the offsets of the newest batch in ``commits/`` (if not committed yet); return its id.

        Never raises: problems are logged (commit failures are counted by :attr:`committer`).
        """
        try:
            with self._lock:
                batch = latest_committed_batch(self.checkpoint_location)
                if batch is None or batch in (self.committer.last_committed_checkpoint, self.committer.in_flight):
                    return batch
                offsets = batch_end_offsets(self.checkpoint_location, batch, self.opts, self.source_index)
                self.committer.snapshot_offsets(batch, offsets)
                log.debug("batch %d is in the commit log; committing %s", batch, fmt_offsets(offsets))
                self.committer.notify_checkpoint_complete(batch)
                return batch
        except Exception as exc:  # noqa: BLE001 - a listener must never break the query
            log.warning("commit listener could not commit the latest batch of %s: %s", self.checkpoint_location,
                        exc)
            return None

    def wait_committed(self, timeout: float = 30.0) -> bool:
        """Block until the newest batch in ``commits/`` has been committed to Kafka (True) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            latest = self.commit_latest()
            if latest is None:
                return True
            if self.committer.wait_idle(max(0.0, deadline - time.monotonic())) and \
                    self.committer.last_committed_checkpoint == latest:
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        self.committer.wait_idle(self.opts.request_timeout_ms / 1000)

    def _mine(self, query_id: str) -> bool:
        return self.query_id is None or query_id == self.query_id


def attach_commit_listener(spark: Any, query: Any, options: Mapping[str, str], checkpoint_location: str,
                           source_index: Optional[int] = None) -> KafkaOffsetCommitListener:
    """Create a :class:`KafkaOffsetCommitListener` for ``query`` and register it with ``spark.streams``.

    Call it right after ``start()`` with the same options as the source. Batches that finish before it is attached
    are covered by the next commit (each commit covers everything before it).
    """
    listener = KafkaOffsetCommitListener(options, checkpoint_location, query_id=str(query.id),
                                         source_index=source_index)
    spark.streams.addListener(listener)
    listener.commit_latest()
    return listener
