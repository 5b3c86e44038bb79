"""Checkpoint-driven Kafka offset commits (docs/kafka.md, "When offsets are committed, and why"), independent of
Spark and of librdkafka.

:class:`CheckpointOffsetCommitter` implements :class:`keyedstate.checkpoint.listener.CheckpointListener`:

* ``snapshot_state(id)`` records the offsets covered by checkpoint ``id`` in an ordered pending map holding at most
  ``max_pending`` (default 100, like Flink) entries; the oldest is evicted when full.
* ``notify_checkpoint_complete(id)`` commits that entry and drops every older pending entry uncommitted (subsumed);
  an unknown id is logged and ignored.
* Offsets are the NEXT offset to read per partition (Spark's exclusive end offsets, Kafka's committed-offset
  convention), so a consumer group resumes exactly after what was processed.
* One commit is in flight at a time. If a newer completed checkpoint arrives while one is in flight it waits in a
  single slot; if that slot was already taken the older offsets are skipped with the warning "committing offsets
  takes longer than the checkpoint interval".
* Failures are counted and logged, never raised.

On Spark the stream reader calls these from the driver's data-source process, and the listener helper from the
user's driver process; the commit function does the actual (asynchronous) Kafka request.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Callable, Mapping, Optional

from keyedstate.checkpoint.listener import CheckpointListener

__all__ = ["CheckpointOffsetCommitter", "TopicPartitionOffsets", "CommitFunction"]

log = logging.getLogger("keyedstate.connectors.kafka.committer")

#: ``{(topic, partition): next_offset_to_read}``
TopicPartitionOffsets = Mapping[tuple[str, int], int]
#: ``commit_fn(offsets, done)`` starts an asynchronous commit and calls ``done(None)`` or ``done(exception)`` once.
CommitFunction = Callable[[dict[tuple[str, int], int], Callable[[Optional[BaseException]], None]], None]

SLOW_COMMIT_WARNING = (
    "committing offsets takes longer than the checkpoint interval; skipping the commit of checkpoint %d because "
    "newer complete checkpoint %d is available")


class CheckpointOffsetCommitter(CheckpointListener):
    """Commits Kafka offsets only for completed checkpoints; see the module docstring for the exact rules.

    Thread-safe: completions may arrive on any thread and commit callbacks on librdkafka's background thread.
    """

    MAX_PENDING_CHECKPOINTS = 100

    def __init__(self, commit_fn: CommitFunction,
                 offsets_provider: Optional[Callable[[], TopicPartitionOffsets]] = None,
                 max_pending: int = MAX_PENDING_CHECKPOINTS, name: str = "kafka") -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be >= 1")
        self._commit_fn = commit_fn
        self._offsets_provider = offsets_provider
        self._max_pending = max_pending
        self._name = name
        self._lock = threading.Condition()
        self._pending: "OrderedDict[int, dict[tuple[str, int], int]]" = OrderedDict()
        self._in_flight: Optional[int] = None
        self._queued: Optional[tuple[int, dict[tuple[str, int], int]]] = None
        self.commits_succeeded = 0
        self.commits_failed = 0
        self.commits_skipped = 0
        self.last_committed_checkpoint: Optional[int] = None
        self.last_committed_offsets: dict[tuple[str, int], int] = {}

    # -- CheckpointListener ------------------------------------------------------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> dict[tuple[str, int], int]:
        """Record the offsets of ``offsets_provider()`` for ``checkpoint_id`` (runs when the checkpoint is taken)."""
        if self._offsets_provider is None:
            raise ValueError("snapshot_state needs an offsets_provider; use snapshot_offsets(id, offsets) instead")
        return self.snapshot_offsets(checkpoint_id, self._offsets_provider())

    def snapshot_offsets(self, checkpoint_id: int, offsets: TopicPartitionOffsets) -> dict[tuple[str, int], int]:
        """Record ``offsets`` (next offset to read per partition) as pending for ``checkpoint_id``."""
        snap = {(str(t), int(p)): int(o) for (t, p), o in offsets.items() if int(o) >= 0}
        with self._lock:
            self._pending.pop(checkpoint_id, None)
            self._pending[checkpoint_id] = snap
            while len(self._pending) > self._max_pending:
                evicted, _ = self._pending.popitem(last=False)
                log.debug("%s: pending checkpoint %d evicted (more than %d pending)", self._name, evicted,
                          self._max_pending)
        return snap

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is durable: commit its offsets, drop older pending ones (never raises)."""
        with self._lock:
            if checkpoint_id not in self._pending:
                log.warning("%s: received completion of unknown checkpoint %d; ignoring it", self._name,
                            checkpoint_id)
                return
            offsets = None
            while self._pending:
                cid, snap = self._pending.popitem(last=False)
                if cid == checkpoint_id:
                    offsets = snap
                    break
                log.debug("%s: checkpoint %d subsumed by %d, not committed", self._name, cid, checkpoint_id)
            assert offsets is not None
            if not offsets:
                log.debug("%s: checkpoint %d covers no offsets; nothing to commit", self._name, checkpoint_id)
                return
            if self._in_flight is not None:
                if self._queued is not None:
                    log.warning(SLOW_COMMIT_WARNING, self._queued[0], checkpoint_id)
                    self.commits_skipped += 1
                self._queued = (checkpoint_id, offsets)
                return
            self._in_flight = checkpoint_id
        self._start(checkpoint_id, offsets)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` will never complete: forget its offsets."""
        with self._lock:
            self._pending.pop(checkpoint_id, None)

    @property
    def in_flight(self) -> Optional[int]:
        return self._in_flight

    def metrics(self) -> dict[str, int]:
        """``commitsSucceeded``, ``commitsFailed``, ``commitsSkipped``, ``pendingCheckpoints``."""
        with self._lock:
            return {"commitsSucceeded": self.commits_succeeded, "commitsFailed": self.commits_failed,
                    "commitsSkipped": self.commits_skipped, "pendingCheckpoints": len(self._pending)}

    def wait_idle(self, timeout: float) -> bool:
        """Block until no commit is in flight or queued (True) or ``timeout`` seconds pass (False)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._in_flight is None and self._queued is None, timeout)

    def _start(self, checkpoint_id: int, offsets: dict[tuple[str, int], int]) -> None:
        done_once = threading.Event()

        def done(error: Optional[BaseException]) -> None:
            if done_once.is_set():
                return
            done_once.set()
            with self._lock:
                if error is None:
                    self.commits_succeeded += 1
                    self.last_committed_checkpoint = checkpoint_id
                    self.last_committed_offsets = dict(offsets)
                    log.debug("%s: committed offsets of checkpoint %d: %s", self._name, checkpoint_id, offsets)
                else:
                    self.commits_failed += 1
                    log.warning("%s: committing offsets of checkpoint %d failed (%s); the next completed checkpoint "
                                "will commit newer offsets. failures so far: %d", self._name, checkpoint_id, error,
                                self.commits_failed)
                nxt = self._queued
                self._queued = None
                self._in_flight = nxt[0] if nxt else None
                self._lock.notify_all()
            if nxt is not None:
                self._start(*nxt)

        try:
            self._commit_fn(dict(offsets), done)
        except Exception as exc:  # noqa: BLE001 - a failed commit is never fatal
            done(exc)
