"""CheckpointOffsetCommitter: semantics.md items 13-16 with a fake commit function (pure logic, no broker)."""

from __future__ import annotations

import logging
import threading

import pytest

from connectors.kafka import CheckpointOffsetCommitter
from keyedstate.checkpoint.listener import CheckpointListener


class FakeCommits:
    """Records commit requests; completes them when told to (or immediately with ``auto=True``)."""

    def __init__(self, auto: bool = False, fail: bool = False) -> None:
        self.auto = auto
        self.fail = fail
        self.requests: list[dict] = []
        self.pending: list = []

    def __call__(self, offsets, done) -> None:
        self.requests.append(offsets)
        if self.auto:
            done(RuntimeError("broker said no") if self.fail else None)
        else:
            self.pending.append(done)

    def complete_next(self, error=None) -> None:
        self.pending.pop(0)(error)


def tp(p: int) -> tuple[str, int]:
    return ("t", p)


def test_implements_checkpoint_listener_protocol():
    assert isinstance(CheckpointOffsetCommitter(FakeCommits()), CheckpointListener)


def test_nothing_is_committed_before_completion_and_completion_commits_next_offsets():
    fake = FakeCommits(auto=True)
    c = CheckpointOffsetCommitter(fake)
    c.snapshot_offsets(1, {tp(0): 10, tp(1): 20})
    assert fake.requests == []  # item 15: never before the checkpoint is complete
    c.notify_checkpoint_complete(1)
    assert fake.requests == [{tp(0): 10, tp(1): 20}]
    assert c.commits_succeeded == 1 and c.last_committed_checkpoint == 1
    assert c.metrics()["pendingCheckpoints"] == 0


def test_snapshot_state_uses_offsets_provider():
    fake = FakeCommits(auto=True)
    current = {tp(0): 5}
    c = CheckpointOffsetCommitter(fake, offsets_provider=lambda: current)
    assert c.snapshot_state(7) == {tp(0): 5}
    current[tp(0)] = 9  # later changes must not leak into the snapshot
    c.notify_checkpoint_complete(7)
    assert fake.requests == [{tp(0): 5}]


def test_completion_subsumes_older_pending_checkpoints_without_committing_them():
    fake = FakeCommits(auto=True)
    c = CheckpointOffsetCommitter(fake)
    for cid in (1, 2, 3, 4):
        c.snapshot_offsets(cid, {tp(0): cid * 10})
    c.notify_checkpoint_complete(3)
    assert fake.requests == [{tp(0): 30}]  # 1 and 2 dropped uncommitted
    assert c.metrics()["pendingCheckpoints"] == 1
    c.notify_checkpoint_complete(2)  # already subsumed -> unknown now
    assert fake.requests == [{tp(0): 30}]
    c.notify_checkpoint_complete(4)  # the one still pending
    assert fake.requests == [{tp(0): 30}, {tp(0): 40}]


def test_unknown_checkpoint_is_logged_and_ignored(caplog):
    fake = FakeCommits(auto=True)
    c = CheckpointOffsetCommitter(fake)
    c.snapshot_offsets(5, {tp(0): 1})
    with caplog.at_level(logging.WARNING, logger="keyedstate.connectors.kafka.committer"):
        c.notify_checkpoint_complete(99)
    assert fake.requests == []
    assert "unknown checkpoint 99" in caplog.text
    c.notify_checkpoint_complete(5)  # still pending
    assert fake.requests == [{tp(0): 1}]


def test_pending_map_is_bounded_and_evicts_oldest():
    fake = FakeCommits(auto=True)
    c = CheckpointOffsetCommitter(fake)
    for cid in range(150):
        c.snapshot_offsets(cid, {tp(0): cid})
    assert c.metrics()["pendingCheckpoints"] == 100
    c.notify_checkpoint_complete(49)  # evicted -> unknown
    assert fake.requests == []
    c.notify_checkpoint_complete(50)  # the oldest kept
    assert fake.requests == [{tp(0): 50}]
    c.notify_checkpoint_complete(149)  # the newest
    assert fake.requests == [{tp(0): 50}, {tp(0): 149}]


def test_aborted_checkpoint_is_dropped():
    fake = FakeCommits(auto=True)
    c = CheckpointOffsetCommitter(fake)
    c.snapshot_offsets(1, {tp(0): 1})
    c.snapshot_offsets(2, {tp(0): 2})
    c.notify_checkpoint_aborted(2)
    assert c.metrics()["pendingCheckpoints"] == 1
    c.notify_checkpoint_complete(2)
    assert fake.requests == []
    c.notify_checkpoint_complete(1)  # the one not aborted
    assert fake.requests == [{tp(0): 1}]


def test_one_commit_in_flight_newer_waits_and_older_queued_one_is_skipped_with_warning(caplog):
    fake = FakeCommits(auto=False)
    c = CheckpointOffsetCommitter(fake)
    for cid in (1, 2, 3):
        c.snapshot_offsets(cid, {tp(0): cid * 10})
    c.notify_checkpoint_complete(1)
    assert c.in_flight == 1 and len(fake.requests) == 1
    c.notify_checkpoint_complete(2)  # waits: only one commit in flight
    assert len(fake.requests) == 1
    with caplog.at_level(logging.WARNING, logger="keyedstate.connectors.kafka.committer"):
        c.notify_checkpoint_complete(3)  # replaces 2, which is skipped
    assert "committing offsets takes longer than the checkpoint interval" in caplog.text
    assert c.commits_skipped == 1
    fake.complete_next()  # 1 done -> 3 starts, 2 never committed
    assert fake.requests == [{tp(0): 10}, {tp(0): 30}]
    assert c.in_flight == 3
    fake.complete_next()
    assert c.in_flight is None and c.commits_succeeded == 2 and c.last_committed_checkpoint == 3
    assert c.wait_idle(0.1)


def test_failed_commit_is_counted_and_never_raises(caplog):
    fake = FakeCommits(auto=True, fail=True)
    c = CheckpointOffsetCommitter(fake)
    c.snapshot_offsets(1, {tp(0): 1})
    with caplog.at_level(logging.WARNING, logger="keyedstate.connectors.kafka.committer"):
        c.notify_checkpoint_complete(1)
    assert c.commits_failed == 1 and c.commits_succeeded == 0
    assert c.last_committed_checkpoint is None
    assert "broker said no" in caplog.text
    # a commit function that raises synchronously is also just a failure
    def boom(offsets, done):
        raise RuntimeError("synchronous failure")

    c2 = CheckpointOffsetCommitter(boom)
    c2.snapshot_offsets(1, {tp(0): 1})
    c2.notify_checkpoint_complete(1)
    assert c2.metrics() == {"commitsSucceeded": 0, "commitsFailed": 1, "commitsSkipped": 0, "pendingCheckpoints": 0}
    assert c2.in_flight is None


def test_completion_from_another_thread_while_callback_runs():
    fake = FakeCommits(auto=False)
    c = CheckpointOffsetCommitter(fake)
    for cid in range(1, 51):
        c.snapshot_offsets(cid, {tp(0): cid})
    stop = threading.Event()

    def completer():
        while not stop.is_set():
            if fake.pending:
                fake.complete_next()

    th = threading.Thread(target=completer)
    th.start()
    try:
        for cid in range(1, 51):
            c.notify_checkpoint_complete(cid)
        assert c.wait_idle(10)
    finally:
        stop.set()
        th.join(5)
    assert c.last_committed_checkpoint == 50
    committed = [r[tp(0)] for r in fake.requests]
    assert committed == sorted(committed)  # never goes backwards
    assert c.commits_succeeded + c.commits_skipped == 50


def test_negative_offsets_are_not_committed():
    fake = FakeCommits(auto=True)
    c = CheckpointOffsetCommitter(fake)
    c.snapshot_offsets(1, {tp(0): -1, tp(1): 4})
    c.notify_checkpoint_complete(1)
    assert fake.requests == [{tp(1): 4}]


def test_max_pending_must_be_positive():
    with pytest.raises(ValueError):
        CheckpointOffsetCommitter(FakeCommits(), max_pending=0)
