"""RocksDB mode's pending-timers metric costs no scan of the state after a key group's first call: a call leaves the
counts of the version it committed beside the key group's databases, the next call (any worker, any copy) starts
from them, and they are used only for that version. Without Spark, real RocksDB."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.types import IntegerType, StructField, StructType

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.spark.key_group_layout import balanced_grouping_value
from keyedstate.spark.metrics import METRICS_FIELDS, METRICS_TAG
from keyedstate.spark.output_frames import side_output_column
from tests.spark.test_group_function_unit import FakeGroupState
from tests.spark.test_rocksdb_mode_calls import KEY_GROUP, worker  # noqa: F401  (the fixture)
from timers.column_queue import ColumnTimerQueue

PENDING_TIMERS = [name for name, _ in METRICS_FIELDS].index("pending_timers")
WITH_METRICS = {METRICS_TAG: StructType([StructField("key_group", IntegerType())])}
TIMEOUT_MS = 60_000


class LatestTimer(KeyedProcessFunction):
    """Count-with-timeout's timers: one event-time timer per key, a minute after its latest element."""

    def open(self, runtime_context):
        self.due = runtime_context.get_state(ValueStateDescriptor("due", Types.LONG()))

    def process_element(self, value, ctx):
        previous = self.due.value()
        if previous is not None:
            ctx.timer_service().delete_event_time_timer(previous)
        due = ctx.timestamp() + TIMEOUT_MS
        ctx.timer_service().register_event_time_timer(due)
        self.due.update(due)
        return ()

    def on_timer(self, timestamp, ctx):
        self.due.clear()
        return ()


class GroupStateAt(FakeGroupState):
    watermark_ms = 0

    def getCurrentWatermarkMs(self) -> int:
        return self.watermark_ms


@pytest.fixture
def scans(monkeypatch) -> list[int]:
    """The key groups whose timers were counted by reading them all."""
    counted: list[int] = []
    length = ColumnTimerQueue.__len__

    def counting(queue: ColumnTimerQueue) -> int:
        if queue.count is None and not queue.complete:
            counted.append(queue.key_group)
        return length(queue)

    monkeypatch.setattr(ColumnTimerQueue, "__len__", counting)
    return counted


def pending_timers(function, users: list[str], state: GroupStateAt, at_ms: int) -> int:
    """Run one call of the key group with ``users``' elements at ``at_ms``; its metrics row's pending timers."""
    frame = pd.DataFrame({"user": users, "_ms": np.full(len(users), at_ms, dtype="int64"), "_kg": KEY_GROUP})
    frames = list(function((balanced_grouping_value(KEY_GROUP),), iter([frame]), state))
    rows = [value for out in frames for value in out[side_output_column(METRICS_TAG)] if isinstance(value, str)]
    assert len(rows) == 1, rows
    return int(rows[0].split(",")[PENDING_TIMERS])


USERS = [f"u{i:03d}" for i in range(300)]  # more timers than the queue caches (128): most live in RocksDB only


@pytest.mark.parametrize("reuse", [True, False], ids=["database-kept-open", "database-closed-between-calls"])
def test_only_the_first_call_reads_every_timer_and_the_count_stays_exact(worker, scans, reuse):  # noqa: F811 (the fixture)
    function, state = worker(reuse=reuse, function=LatestTimer(), side_schemas=WITH_METRICS), GroupStateAt()
    assert pending_timers(function, USERS, state, at_ms=1_000) == 300
    assert scans == []  # a key group without a committed version starts from zero timers
    assert pending_timers(function, USERS[:50] + ["new-1", "new-2"], state, at_ms=2_000) == 302
    state.watermark_ms = 1_000 + TIMEOUT_MS  # the 250 timers of the first call's other keys fire
    assert pending_timers(function, ["new-3"], state, at_ms=3_000) == 53
    assert pending_timers(function, [], state, at_ms=3_000) == 53
    assert scans == []


def test_a_copy_restored_elsewhere_counts_once_then_reads_no_more(worker, scans, tmp_path):  # noqa: F811 (the fixture)
    import shutil

    function, state = worker(reuse=False, function=LatestTimer(), side_schemas=WITH_METRICS), GroupStateAt()
    pending_timers(function, USERS, state, at_ms=1_000)
    shutil.rmtree(tmp_path / "local")  # a new executor: the database is rebuilt from storage, no counts beside it
    assert pending_timers(function, USERS[:10], state, at_ms=2_000) == 300
    assert scans == [KEY_GROUP]
    assert pending_timers(function, ["new"], state, at_ms=3_000) == 301
    assert scans == [KEY_GROUP]


def test_the_counts_of_an_attempt_spark_did_not_commit_are_not_used(worker, scans):  # noqa: F811 (the fixture)
    function, state = worker(reuse=False, function=LatestTimer(), side_schemas=WITH_METRICS), GroupStateAt()
    pending_timers(function, USERS, state, at_ms=1_000)
    committed = copy.deepcopy(state)
    assert pending_timers(function, ["new-1", "new-2"], state, at_ms=2_000) == 302  # its counts are left behind
    # the retry starts from the committed row: those counts belong to another version, so it counts
    assert pending_timers(function, ["new-1"], committed, at_ms=2_000) == 301
    assert scans == [KEY_GROUP]
