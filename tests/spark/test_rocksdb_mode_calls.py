"""RocksDB-mode calls in one worker process, without Spark: a key group's database stays open between calls when
Spark reuses workers, and an open database is trusted only while it holds the committed version."""

from __future__ import annotations

import copy
import os

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.spark.group_function import _RUNTIMES, EVENT_TIME, GroupFunctionSpec, make_group_function
from keyedstate.spark.key_group_layout import balanced_grouping_value
from keyedstate.spark.open_databases import open_databases_of
from keyedstate.spark.outputs import OutputLayout
from tests.spark.test_group_function_unit import FakeGroupState

KEY_GROUP = 3


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield ctx.get_current_key(), count


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """A worker process's group function for a RocksDB-mode query; ``reuse`` as Spark's SPARK_REUSE_WORKER."""
    created = []

    def make(reuse: bool):
        if reuse:
            monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
        else:
            monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
        spec = GroupFunctionSpec(
            runtime_id=f"calls-{len(created)}-{tmp_path.name}", key_columns=("user",), value_columns=("user",),
            key_group_column="_kg", event_time_ms_column="_ms", time_mode=EVENT_TIME, num_key_groups=8,
            poll_interval_ms=1000,
            layout=OutputLayout(StructType([StructField("user", StringType()), StructField("n", LongType())])),
            state_backend="rocksdb", state_storage=str(tmp_path / "storage"), local_dir=str(tmp_path / "local"),
        )
        created.append(spec.runtime_id)
        return make_group_function(spec, RunningCount())

    yield make
    for runtime_id in created:
        runtime = _RUNTIMES.pop(runtime_id, None)
        store = getattr(runtime, "store", None)
        if store is not None and store.open is not None:
            store.open.close_all()


def call(function, users: list[str], state: FakeGroupState, batch_ms: int = 0) -> list[tuple]:
    frame = pd.DataFrame({"user": users, "_ms": np.full(len(users), 1_000 + batch_ms, dtype="int64"),
                          "_kg": KEY_GROUP})
    out = list(function((balanced_grouping_value(KEY_GROUP),), iter([frame]), state))
    return sorted(tuple(row) for frame in out for row in frame.itertuples(index=False)
                  if not any(isinstance(value, float) and np.isnan(value) for value in row))


def database_path(tmp_path) -> str:
    return str(next((tmp_path / "local").glob(f"*/*/kg-{KEY_GROUP:05d}")))


def test_with_worker_reuse_the_database_stays_open_between_calls_and_untagged_on_disk(worker, tmp_path):
    function, state = worker(reuse=True), FakeGroupState()
    call(function, ["a", "b"], state)  # a first call stores its new database whole, and keeps it open too
    open_databases = open_databases_of(_local_of(tmp_path))
    assert len(open_databases) == 1
    call(function, ["a"], state)
    path = database_path(tmp_path)
    assert not os.path.exists(os.path.join(path, "KEYEDSTATE-TAG"))  # open here, trusted in memory only
    assert len(open_databases) == 1
    assert call(function, ["a", "b"], state) == [("a", 3), ("b", 2)]


def test_without_worker_reuse_every_call_closes_and_tags_its_database(worker, tmp_path):
    function, state = worker(reuse=False), FakeGroupState()
    call(function, ["a"], state)
    call(function, ["a"], state)
    assert os.path.exists(os.path.join(database_path(tmp_path), "KEYEDSTATE-TAG"))
    assert call(function, ["a"], state) == [("a", 3)]


def test_a_retried_call_on_a_database_kept_open_after_an_uncommitted_attempt_starts_from_the_committed_version(
        worker, tmp_path):
    function, state = worker(reuse=True), FakeGroupState()
    call(function, ["a"], state)
    call(function, ["a"], state)
    committed = copy.deepcopy(state)
    assert call(function, ["a", "a"], state) == [("a", 3), ("a", 4)]  # an attempt Spark does not commit
    # the retry gets the committed row; the open database holds the failed attempt's writes
    assert call(function, ["a"], committed) == [("a", 3)]
    assert call(function, ["a"], committed) == [("a", 4)]


def test_a_kept_database_whose_directory_was_removed_is_rebuilt_from_storage(worker, tmp_path):
    import shutil

    function, state = worker(reuse=True), FakeGroupState()
    for _ in range(3):
        call(function, ["a"], state)
    shutil.rmtree(database_path(tmp_path))  # disk cleanup under a running worker
    assert call(function, ["a"], state) == [("a", 4)]


def _local_of(tmp_path):
    from keyedstate.spark.local_databases import LocalDatabases

    return LocalDatabases(str(tmp_path / "local"))


def test_a_new_database_kept_open_after_its_first_call_records_the_writes_of_the_next(worker, tmp_path):
    import shutil

    function, state = worker(reuse=True), FakeGroupState()
    call(function, ["a"], state)  # stored whole, then kept open
    call(function, ["a", "b"], state)  # on the kept database: these writes must reach a changelog
    open_databases_of(_local_of(tmp_path)).close_all()
    shutil.rmtree(tmp_path / "local")  # so the next call rebuilds from durable storage alone
    assert call(function, ["a", "b"], state) == [("a", 3), ("b", 2)]


def test_a_kept_database_lost_with_its_lock_file_is_dropped_and_the_path_opened_again(worker, tmp_path):
    import shutil

    function, state = worker(reuse=True), FakeGroupState()
    for _ in range(3):
        call(function, ["a"], state)
    path = database_path(tmp_path)
    shutil.rmtree(os.path.dirname(os.path.dirname(path)))  # databases and lock files: the path is up for grabs
    assert call(function, ["a"], state) == [("a", 4)]  # rebuilt under a new lock, opened again in this process
    assert call(function, ["a"], state) == [("a", 5)]
    handles = list((tmp_path / "local" / "handles" / str(os.getpid())).iterdir())
    assert len(handles) == 1 and handles[0].resolve() == (tmp_path / "local").resolve() / os.path.relpath(
        path, tmp_path / "local")  # only the kept database's handle is left
