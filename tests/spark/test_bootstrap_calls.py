"""bootstrap_keyed_state's key-group calls and a query's first calls on its output, without Spark (real heap and
RocksDB backends, real storage in tmp_path): the query starts from the bootstrapped state and timers, a restart
continues, the refusals, and the bootstrap's files outliving the query's garbage collection."""

from __future__ import annotations

import uuid
from typing import Optional

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from keyedstate import KeyedProcessFunction, KeyedStateBootstrapFunction, Types, ValueStateDescriptor
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError
from keyedstate.spark.bootstrap import _BootstrapJob, _group_function
from keyedstate.spark.group_function import _RUNTIMES, make_group_function
from keyedstate.spark.group_spec import GroupFunctionSpec
from keyedstate.spark.key_group_layout import balanced_grouping_value
from keyedstate.spark.options import PROCESSING_TIME, KeyedProcessOptions
from keyedstate.spark.output_frames import OutputLayout
from keyedstate.state.key_groups.initial_state import InitialState, KeyedStateBootstrap, resolve_initial_state
from keyedstate.state.key_groups.row_format import StateRow
from keyedstate.state.rocksdb.versions import SnapshotPolicy, VersionRecord
from tests.spark.test_group_function_unit import FakeGroupState

KEY_GROUPS = 4
KEY_GROUP = 1
OUTPUT = StructType([StructField("k", StringType()), StructField("n", LongType())])


class Seed(KeyedStateBootstrapFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        assert isinstance(ctx, KeyedStateBootstrapFunction.Context)
        self.count.update((self.count.value() or 0) + value["n"])
        ctx.timer_service().register_event_time_timer(value["ts"])


class Emits(Seed):
    def process_element(self, value, ctx):
        yield value["user"], 1


class Counter(KeyedProcessFunction):
    """Running count per key (op ``clear`` empties it); a timer emits ``timer:<key>`` with the count."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        if value["op"] == "clear":
            self.count.clear()
            return
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield ctx.get_current_key(), count

    def on_timer(self, timestamp, ctx):
        yield f"timer:{ctx.get_current_key()}", self.count.value()


class Watermarked(FakeGroupState):
    def __init__(self, row: Optional[tuple] = None) -> None:
        super().__init__()
        self.row = row
        self.watermark = 0

    def getCurrentWatermarkMs(self) -> int:
        return self.watermark


def backend_args(backend: str, tmp_path, policy: Optional[SnapshotPolicy] = None) -> dict:
    if backend == "heap":
        return {"state_backend": "heap"}
    return {"state_backend": "rocksdb", "state_storage": str(tmp_path / "query-storage"),
            "state_local_dir": str(tmp_path / "local"), "snapshot_policy": policy, "uid": "keyed_process"}


def bootstrap(tmp_path, backend: str, rows: dict[int, list[tuple[str, int, int]]], function=None,
              name: str = "bootstrap") -> KeyedStateBootstrap:
    """Run the bootstrap's group function for each key group of ``rows`` ({key group: [(user, n, ts)]}) and commit
    it, as bootstrap_keyed_state does with Spark's groups."""
    path = str(tmp_path / name)
    options = KeyedProcessOptions(
        time_mode=PROCESSING_TIME, num_key_groups=KEY_GROUPS, state_backend=backend, state_storage=path,
        uid="bootstrap", state_local_dir=str(tmp_path / "local") if backend == "rocksdb" else None)
    job = _BootstrapJob.create(function or Seed(), options, (("user", "string"),), ("user", "n", "ts"))
    group = _group_function(job)
    results = []
    for key_group, elements in rows.items():
        frame = pd.DataFrame(elements, columns=["user", "n", "ts"]).assign(_keyedstate_key_group=key_group)
        out = group((key_group,), frame)
        results.append((int(out["key_group"][0]), out["entry"][0]))
    _RUNTIMES.pop(job.spec.runtime_id, None)
    return job.commit(CheckpointStorage(path), results)


def query(tmp_path, backend: str, initial: Optional[InitialState], policy: Optional[SnapshotPolicy] = None):
    spec = GroupFunctionSpec(
        runtime_id=f"query-{uuid.uuid4().hex}", key_columns=("user",), value_columns=("user", "op"),
        key_group_column="_kg", event_time_ms_column="_ms", layout=OutputLayout(OUTPUT), initial_state=initial,
        options=KeyedProcessOptions(num_key_groups=KEY_GROUPS, **backend_args(backend, tmp_path, policy)),
    )
    return make_group_function(spec, Counter())


def call(function, users: list[str], state: Watermarked, key_group: int = KEY_GROUP, op: str = "add") -> list[tuple]:
    frame = pd.DataFrame({"user": users, "op": op, "_ms": np.full(len(users), 1_000, dtype="int64"),
                          "_kg": key_group})
    out = list(function((balanced_grouping_value(key_group),), iter([frame]), state))
    return sorted(tuple(row) for frame in out for row in frame.itertuples(index=False))


def initial(tmp_path, backend: str, boot: KeyedStateBootstrap) -> InitialState:
    return resolve_initial_state(boot.path, state_backend=backend, num_key_groups=KEY_GROUPS, key_types=["string"],
                                 storage_options=None)


@pytest.fixture(params=["heap", "rocksdb"])
def backend(request):
    yield request.param
    _RUNTIMES.clear()


def test_a_query_starts_from_the_bootstrapped_state_and_timers_and_a_restart_continues(tmp_path, backend):
    boot = bootstrap(tmp_path, backend, {KEY_GROUP: [("a", 5, 100), ("b", 2, 200), ("a", 1, 50)], 2: [("c", 7, 10)]})
    assert (boot.key_groups_with_state, boot.num_key_groups, boot.key_columns) == (2, KEY_GROUPS, (("user", "string"),))
    start = initial(tmp_path, backend, boot)
    function, state = query(tmp_path, backend, start), Watermarked()
    assert call(function, ["a", "d"], state) == [("a", 7), ("d", 1)]
    state.watermark = 150  # the bootstrap's timers of a (50, 100) fire, b's (200) not yet
    assert call(function, [], state) == [("timer:a", 7), ("timer:a", 7)]
    row = StateRow.from_row(state.row)
    assert (row.tag if backend == "heap" else VersionRecord.from_bytes(row.state).origin) == boot.bootstrap_id
    # a restart (a new runtime, Spark's committed row) continues from the row, not from the bootstrap again
    restarted, again = query(tmp_path, backend, start), Watermarked(state.row)
    again.watermark = 250
    assert call(restarted, ["b"], again) == [("b", 3), ("timer:b", 2)]  # timers fire before the elements
    # key group 2 had no call yet: it starts from the bootstrap in the restarted query too (the worker's watermark
    # is 250 already, so c's bootstrapped timer fires first)
    assert call(restarted, ["c"], Watermarked(), key_group=2) == [("c", 8), ("timer:c", 7)]


def test_a_key_group_emptied_after_the_bootstrap_stays_empty(tmp_path, backend):
    start = initial(tmp_path, backend, bootstrap(tmp_path, backend, {KEY_GROUP: [("a", 5, 100)]}))
    function, state = query(tmp_path, backend, start), Watermarked()
    state.watermark = 150
    # the bootstrap's timer fires, then "clear" empties a: the key group holds no state and no timer
    assert call(function, ["a"], state, op="clear") == [("timer:a", 5)]
    assert state.row is not None  # kept though empty: without a row the next call would load the bootstrap again
    assert call(function, ["a"], state) == [("a", 1)]
    assert call(query(tmp_path, backend, start), ["a"], Watermarked(state.row)) == [("a", 2)]


def test_a_checkpoint_holding_other_state_refuses_the_initial_state_and_a_bootstrapped_one_needs_it(tmp_path,
                                                                                                   backend):
    start = initial(tmp_path, backend, bootstrap(tmp_path, backend, {KEY_GROUP: [("a", 5, 100)]}))
    plain = Watermarked()
    call(query(tmp_path, backend, None), ["a"], plain)
    with pytest.raises(ConfigurationError, match="already holds state \\(key group 1\\) that did not start from "
                                                 "initial_state .*Use a new checkpoint location"):
        call(query(tmp_path, backend, start), ["a"], Watermarked(plain.row))
    bootstrapped = Watermarked()
    call(query(tmp_path, backend, start), ["a"], bootstrapped)
    with pytest.raises(ConfigurationError, match="runs without initial_state; .*Restart with initial_state="):
        call(query(tmp_path, backend, None), ["a"], Watermarked(bootstrapped.row))
    other = initial(tmp_path, backend, bootstrap(tmp_path, backend, {KEY_GROUP: [("a", 1, 1)]}, name="other"))
    with pytest.raises(ConfigurationError, match="started from bootstrap [0-9a-f]+, but initial_state"):
        call(query(tmp_path, backend, other), ["a"], Watermarked(bootstrapped.row))


def test_a_bootstrap_function_that_emits_output_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="Emits.process_element emitted output; a "
                                                 "KeyedStateBootstrapFunction only writes state"):
        bootstrap(tmp_path, "heap", {KEY_GROUP: [("a", 5, 100)]}, function=Emits())


def test_the_query_never_deletes_or_names_the_bootstraps_files(tmp_path):
    boot = bootstrap(tmp_path, "rocksdb", {KEY_GROUP: [(f"u{i}", i, 10**12) for i in range(200)]})
    before = sorted(p for p in (tmp_path / "bootstrap").rglob("*") if p.is_file())
    assert any(p.parent.name == f"kg-{KEY_GROUP:05d}" for p in before)  # the version files
    policy = SnapshotPolicy(max_changelogs=1, min_changelog_bytes=1)  # a new base (and garbage collection) often
    function, state = query(tmp_path, "rocksdb", initial(tmp_path, "rocksdb", boot), policy), Watermarked()
    for batch in range(5):
        call(function, [f"u{batch}"], state)
        record = VersionRecord.from_bytes(StateRow.from_row(state.row).state)
        assert record.location.startswith(str(tmp_path / "query-storage"))
    assert sorted(p for p in (tmp_path / "bootstrap").rglob("*") if p.is_file()) == before
    assert call(function, ["u7"], state) == [("u7", 8)]


def test_the_driver_refuses_a_bootstrap_that_does_not_fit_the_query(tmp_path):
    boot = bootstrap(tmp_path, "heap", {KEY_GROUP: [("a", 5, 100)]})
    fits = dict(state_backend="heap", num_key_groups=KEY_GROUPS, key_types=["string"], storage_options=None)
    assert resolve_initial_state(boot, **fits).bootstrap_id == boot.bootstrap_id
    with pytest.raises(ConfigurationError, match="bootstrapped with state_backend='heap' but keyed_process runs with "
                                                 "state_backend='rocksdb'"):
        resolve_initial_state(boot.path, **{**fits, "state_backend": "rocksdb"})
    with pytest.raises(ConfigurationError, match="bootstrapped with num_key_groups=4 but keyed_process runs with "
                                                 "num_key_groups=8; .*Run the query with num_key_groups=4"):
        resolve_initial_state(boot.path, **{**fits, "num_key_groups": 8})
    with pytest.raises(ConfigurationError, match="key columns of types \\(string\\) but the query's key columns "
                                                 "have types \\(bigint\\)"):
        resolve_initial_state(boot.path, **{**fits, "key_types": ["bigint"]})
    with pytest.raises(ConfigurationError, match="holds no bootstrap or savepoint \\(_bootstrap.json is missing\\)"):
        resolve_initial_state(str(tmp_path / "nothing"), **fits)
    with pytest.raises(ConfigurationError, match="num_key_groups=None cannot start from a bootstrap"):
        resolve_initial_state(boot.path, **{**fits, "num_key_groups": None})
