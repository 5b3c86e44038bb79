"""RocksDB-mode calls in one worker process, without Spark: a key group's database stays open between calls when
Spark reuses workers, and an open database is trusted only while it holds the committed version."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.spark.group_function import _RUNTIMES, make_group_function
from keyedstate.spark.group_spec import GroupFunctionSpec
from keyedstate.spark.key_group_layout import balanced_grouping_value
from keyedstate.spark.open_databases import open_databases_of
from keyedstate.spark.options import KeyedProcessOptions
from keyedstate.spark.output_frames import OutputLayout
from tests.spark.test_group_function_unit import FakeGroupState

KEY_GROUP = 3


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield ctx.get_current_key(), count


def spec_for(tmp_path, runtime_id: str) -> GroupFunctionSpec:
    """A RocksDB-mode query's group function spec; every worker process of the query builds the same one."""
    return GroupFunctionSpec(
        runtime_id=runtime_id, key_columns=("user",), value_columns=("user",),
        key_group_column="_kg", event_time_ms_column="_ms",
        layout=OutputLayout(StructType([StructField("user", StringType()), StructField("n", LongType())])),
        options=rocksdb_options(tmp_path),
    )


def rocksdb_options(tmp_path) -> KeyedProcessOptions:
    return KeyedProcessOptions(num_key_groups=8, state_backend="rocksdb", state_storage=str(tmp_path / "storage"),
                               state_local_dir=str(tmp_path / "local"), uid="keyed_process")


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """A worker process's group function for a RocksDB-mode query; ``reuse`` as Spark's SPARK_REUSE_WORKER, ``changes``
    to its options (a snapshot policy); ``function`` (default RunningCount) and ``side_schemas`` of its output."""
    created = []

    def make(reuse: bool, function=None, side_schemas=None, **changes):
        if reuse:
            monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
        else:
            monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
        spec = spec_for(tmp_path, f"calls-{len(created)}-{tmp_path.name}")
        spec = dataclasses.replace(spec, options=dataclasses.replace(spec.options, **changes),
                                   layout=OutputLayout(spec.layout.main_schema, side_schemas))
        created.append(spec.runtime_id)
        return make_group_function(spec, function if function is not None else RunningCount())

    yield make
    for runtime_id in created:
        runtime = _RUNTIMES.pop(runtime_id, None)
        copies = getattr(getattr(runtime, "store", None), "copies", None)
        if copies is not None and copies.open is not None:
            copies.open.close_all()


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


class CountsFlaggedUsersOnly(KeyedProcessFunction):
    """Keeps state for a few keys only, as a function that remembers the cards it flagged: most key groups never
    store anything."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        user = ctx.get_current_key()
        if user.startswith("flagged"):
            count = (self.count.value() or 0) + 1
            self.count.update(count)
            yield user, count
        else:
            yield user, 0


def test_a_key_group_that_stores_nothing_keeps_one_database_open_instead_of_a_new_one_per_call(worker, tmp_path):
    function, state = worker(reuse=True, function=CountsFlaggedUsersOnly()), FakeGroupState()
    assert call(function, ["a", "b"], state) == [("a", 0), ("b", 0)]
    assert not state.exists  # no state, so no version and no row
    path = database_path(tmp_path)
    assert len(open_databases_of(_local_of(tmp_path))) == 1
    identity = os.stat(path).st_ino, sorted(os.listdir(path))  # a new database: a new directory, a new MANIFEST
    for _ in range(3):
        assert call(function, ["c"], state) == [("c", 0)] and not state.exists
    assert (os.stat(path).st_ino, sorted(os.listdir(path))) == identity  # the same database, never reopened
    assert call(function, ["flagged-1", "d"], state) == [("d", 0), ("flagged-1", 1)]
    assert state.exists
    assert call(function, ["flagged-1"], state) == [("flagged-1", 2)]


def test_a_database_kept_after_storing_nothing_is_deleted_when_its_holder_closes_it(worker, tmp_path):
    function, state = worker(reuse=True, function=CountsFlaggedUsersOnly()), FakeGroupState()
    call(function, ["a"], state)
    path = database_path(tmp_path)
    open_databases_of(_local_of(tmp_path)).close_all()  # as after 20 s unused, or when another worker asks for it
    assert not os.path.exists(path)  # no tag that no version has: nothing for another process to trust
    assert call(function, ["flagged-1"], state) == [("flagged-1", 1)] and state.exists


def test_a_database_kept_after_storing_nothing_serves_no_key_group_that_has_state_and_the_other_way_round(
        worker, tmp_path):
    """Two histories of one key group through one worker (as a retried batch, or a query restarted from an earlier
    checkpoint, would have): the database of one is never taken for the other's."""
    function = worker(reuse=True, function=CountsFlaggedUsersOnly())
    without_state, with_state = FakeGroupState(), FakeGroupState()
    assert call(function, ["a"], without_state) == [("a", 0)]  # kept, having stored nothing
    assert call(function, ["flagged-1"], with_state) == [("flagged-1", 1)]  # takes it: there is nothing to see
    assert call(function, ["a"], without_state) == [("a", 0)]  # not the database holding flagged-1's count...
    assert call(function, ["flagged-1"], without_state) == [("flagged-1", 1)]
    assert call(function, ["flagged-1"], with_state) == [("flagged-1", 2)]  # ...and this one rebuilt from storage


def changelog_cache(tmp_path):
    """The directory of the key group's changelogs written on this machine (keyedstate.spark.local_changelogs)."""
    return next((tmp_path / "local").glob(f"*/*/kg-{KEY_GROUP:05d}.changelogs"))


def _stored_files_of_version(tmp_path, tag: str) -> list:
    return [path for path in (tmp_path / "storage").rglob(f"*-{tag}*") if path.is_file()]


def _run_with_an_older_copy(worker, tmp_path, **changes):
    """Without worker reuse every call closes and tags its database: keep the copy the first call left, let two
    more calls run, then put the old copy back, as a worker process that last ran the key group two batches ago
    has it. Returns the group state and the old copy's tag. ``changes``: to the query's options (a snapshot policy)."""
    function, state = worker(reuse=False, **changes), FakeGroupState()
    call(function, ["a"], state)
    path = database_path(tmp_path)
    shutil.copytree(path, tmp_path / "older-copy")
    older_tag = (tmp_path / "older-copy" / "KEYEDSTATE-TAG").read_text()
    call(function, ["a"], state)
    call(function, ["a"], state)
    shutil.rmtree(path)
    shutil.copytree(tmp_path / "older-copy", path)
    return function, state, older_tag


def test_a_copy_some_versions_behind_catches_up_with_the_changelogs_it_missed(worker, tmp_path):
    function, state, older_tag = _run_with_an_older_copy(worker, tmp_path)
    stored = _stored_files_of_version(tmp_path, older_tag)
    assert stored  # what the old copy holds was stored once...
    for path in stored:
        path.unlink()  # ...and is gone now: a rebuild from storage would fail, replaying what it missed does not
    assert call(function, ["a"], state) == [("a", 4)]
    assert call(function, ["a"], state) == [("a", 5)]


def test_a_damaged_changelog_a_copy_would_catch_up_with_fails_naming_the_file(worker, tmp_path):
    from keyedstate.errors import SnapshotCorruptedError

    function, state, older_tag = _run_with_an_older_copy(worker, tmp_path)
    shutil.rmtree(changelog_cache(tmp_path))  # as on a machine that did not write them: read from storage
    missed = sorted(path for path in (tmp_path / "storage").rglob("c*.log") if older_tag not in path.name)[0]
    data = bytearray(missed.read_bytes())
    data[len(data) // 2] ^= 0xFF
    missed.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptedError, match=missed.name):
        call(function, ["a"], state)


def test_two_worker_processes_keep_a_copy_each_and_neither_rebuilds_after_its_first_call(worker, tmp_path, caplog):
    """Spark gives a partition's tasks to either worker: each keeps its own copy of the key group's database open
    and catches up with the other's changelogs, instead of one closing it for the other to open."""
    import logging
    import pickle
    import subprocess
    import sys
    import textwrap

    state_file = tmp_path / "row.pickle"
    other = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, pickle, sys, pathlib
        os.environ["SPARK_REUSE_WORKER"] = "1"
        from tests.spark import test_rocksdb_mode_calls as calls
        from keyedstate.spark.group_function import make_group_function
        tmp_path = pathlib.Path({str(tmp_path)!r})
        function = make_group_function(calls.spec_for(tmp_path, "other-worker"), calls.RunningCount())
        for line in sys.stdin:
            with open({str(state_file)!r}, "rb") as file:
                state = pickle.load(file)
            answer = calls.call(function, line.split(), state)
            with open({str(state_file)!r}, "wb") as file:
                pickle.dump(state, file)
            print(answer, flush=True)
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd())

    def call_in_other_worker(state) -> str:
        state_file.write_bytes(pickle.dumps(state))
        other.stdin.write("a\n")
        other.stdin.flush()
        answer = other.stdout.readline().strip()
        assert answer, other.stderr.read()
        state.row = pickle.loads(state_file.read_bytes()).row
        return answer

    try:
        function, state = worker(reuse=True), FakeGroupState()
        assert call(function, ["a"], state) == [("a", 1)]
        assert call_in_other_worker(state) == "[('a', 2)]"  # the first copy is kept open here: it makes a second
        with caplog.at_level(logging.INFO, logger="keyedstate.spark.rocksdb"):
            assert call(function, ["a"], state) == [("a", 3)]
            assert call_in_other_worker(state) == "[('a', 4)]"
            assert call(function, ["a"], state) == [("a", 5)]
        assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]
        copies = sorted(path.name for path in (tmp_path / "local").glob(f"*/*/kg-{KEY_GROUP:05d}*")
                        if path.is_dir() and not path.is_symlink()  # not the processes' handles to them
                        and not path.name.endswith(".changelogs"))
        assert copies == [f"kg-{KEY_GROUP:05d}", f"kg-{KEY_GROUP:05d}.c1"]
        assert len(open_databases_of(_local_of(tmp_path))) == 1  # this worker's copy never closed
    finally:
        other.stdin.close()
        other.wait(timeout=60)


def test_a_copy_marks_the_base_it_wrote_and_one_rebuilt_from_storage_the_base_it_downloaded(worker, tmp_path):
    """What decides which copy writes the next base (keyedstate.state.key_groups.copy_markers): the copy that holds
    the stored base's files, even after compaction replaced them."""
    from keyedstate.spark import SnapshotPolicy
    from keyedstate.state.key_groups.copy_markers import holds_base
    from keyedstate.state.key_groups.versioned import committed_version

    function, state = worker(reuse=False, snapshot_policy=SnapshotPolicy(max_changelogs=2)), FakeGroupState()
    for _ in range(3):
        call(function, ["a"], state)
    written = committed_version(state, 8)
    assert written.base is not None and not written.changelogs  # the third call wrote a base
    path = database_path(tmp_path)
    assert holds_base(path, written)
    call(function, ["a"], state)
    assert holds_base(path, committed_version(state, 8))  # a changelog since: the same base
    shutil.rmtree(path)
    assert call(function, ["a"], state) == [("a", 5)]  # rebuilt from the base and its changelog
    rebuilt = committed_version(state, 8)
    assert rebuilt.base == written.base and holds_base(database_path(tmp_path), rebuilt)


MANY_KEY_GROUPS_UNDER_A_LOW_LIMIT = """
import dataclasses, json, resource, sys
import numpy as np, pandas as pd
from pathlib import Path
from keyedstate.spark.group_function import make_group_function
from keyedstate.spark.key_group_layout import balanced_grouping_value
from keyedstate.spark.open_databases import open_databases_of
from tests.spark.test_group_function_unit import FakeGroupState
from tests.spark.test_rocksdb_mode_calls import RunningCount, _local_of, spec_for

tmp_path, key_groups = Path(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[3]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
spec = spec_for(tmp_path, "low-limit")
spec = dataclasses.replace(spec, options=dataclasses.replace(spec.options, num_key_groups=key_groups))
function = make_group_function(spec, RunningCount())
states = [FakeGroupState() for _ in range(key_groups)]
last = {}
for batch in range(3):
    for group in range(key_groups):
        frame = pd.DataFrame({"user": [f"u{group}"], "_ms": np.array([1_000 + batch], dtype="int64"), "_kg": group})
        for out in function((balanced_grouping_value(group),), iter([frame]), states[group]):
            for user, count in out.itertuples(index=False):
                if isinstance(user, str):
                    last[user] = count
print(json.dumps({"counts": last, "kept": len(open_databases_of(_local_of(tmp_path)))}))
"""


def test_a_worker_under_a_low_limit_of_open_files_keeps_fewer_databases_instead_of_failing(tmp_path):
    """64 key groups' databases hold more files than a limit of 256 allows: the worker keeps as many as half the
    limit has room for and opens the others per call (without the bound: "Too many open files")."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", MANY_KEY_GROUPS_UNDER_A_LOW_LIMIT, str(tmp_path), "64", "256"],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "SPARK_REUSE_WORKER": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout)
    assert outcome["counts"] == {f"u{group}": 3 for group in range(64)}  # nothing lost over three batches
    assert 0 < outcome["kept"] < 64
