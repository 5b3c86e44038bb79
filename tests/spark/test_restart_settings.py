"""A restart on the same checkpoint is checked against the settings the committed state was written with, before the
restarted query processes anything (semantics 27): an incompatible change fails naming the setting, both values and
the fix, and nothing is committed, so the old settings still continue every key's state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from keyedstate import KeyedProcessFunction, ListStateDescriptor, StateTtlConfig, Time, Types, ValueStateDescriptor
from keyedstate.api.co_process_function import KeyedCoProcessFunction
from keyedstate.keygroups import key_group_of_columns
from keyedstate.spark import keyed_co_process, keyed_process
from tests.spark.file_stream import write_input
from tests.spark.worker_logs import log_warnings_to

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "user STRING, n INT, ts TIMESTAMP"
OUTPUT = "user STRING, count BIGINT"


class Tally(KeyedProcessFunction):
    """Counts per key; the declaration of its state is what the tests change between runs."""

    def __init__(self, count_type: Any = None, ttl: bool = False, as_list: bool = False, extra_state: bool = False):
        self.count_type = count_type if count_type is not None else Types.LONG()
        self.ttl = ttl
        self.as_list = as_list
        self.extra_state = extra_state

    def open(self, runtime_context):
        if self.as_list:
            self.count = runtime_context.get_list_state(ListStateDescriptor("count", self.count_type))
            return
        descriptor = ValueStateDescriptor("count", self.count_type)
        if self.ttl:
            descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.days(1)).build())
        self.count = runtime_context.get_state(descriptor)
        if self.extra_state:
            self.last = runtime_context.get_state(ValueStateDescriptor("last_n", Types.INT()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        if self.extra_state:
            self.last.update(value["n"])
        yield value["user"], count


class Broken(Tally):
    def process_element(self, value, ctx):
        raise ValueError("the first version is broken")


def users_in_key_groups(num_key_groups: int, wanted: Callable[[int], bool], how_many: int) -> list[str]:
    users = (f"user-{i}" for i in range(10_000))
    return [u for u in users if wanted(key_group_of_columns([u], ["string"], num_key_groups))][:how_many]


def rows(users: list[str], second: int) -> list[dict]:
    return [{"user": u, "n": i, "ts": f"2026-01-01T00:00:{second:02d}"} for i, u in enumerate(users)]


class Query:
    """One checkpoint, started again and again with other settings; outputs go to JSON files."""

    def __init__(self, spark, base: Path):
        self.spark, self.base = spark, base
        self.inputs = 0

    @property
    def checkpoint(self) -> Path:
        return self.base / "checkpoint"

    def committed_batches(self) -> int:
        commits = self.checkpoint / "commits"
        return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0

    def add_input(self, batch_rows: list[dict]) -> None:
        write_input(self.base / "in", self.inputs, batch_rows)
        self.inputs += 1

    def source(self, transform: Optional[Callable[[DataFrame], DataFrame]] = None) -> DataFrame:
        frame = self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(self.base / "in"))
        frame = frame.withWatermark("ts", "0 seconds")
        return transform(frame) if transform is not None else frame

    def start(self, function: Any, *, key_columns=("user",), transform=None, **options: Any):
        options = {"num_key_groups": 4, "event_time_column": "ts", **options}
        output = keyed_process(self.source(transform), list(key_columns), function, OUTPUT, **options)
        return self._write(output)

    def _write(self, output: DataFrame):
        return (output.writeStream.outputMode("append").format("json")
                .option("checkpointLocation", str(self.checkpoint)).option("path", str(self.base / "out")).start())

    def run(self, function: Any, **options: Any) -> None:
        query = self.start(function, **options)
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    def refused(self, function: Any, **options: Any) -> str:
        """Start with ``options``; the query must fail before it commits a batch. Returns the error text."""
        committed = self.committed_batches()
        query = self.start(function, **options)
        try:
            with pytest.raises(StreamingQueryException) as raised:
                query.awaitTermination(120)
        finally:
            query.stop()
        assert self.committed_batches() == committed
        return str(raised.value)

    def counts(self) -> dict[str, int]:
        """The highest count output per user."""
        best: dict[str, int] = {}
        for path in (self.base / "out").glob("part-*.json"):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                best[record["user"]] = max(best.get(record["user"], 0), record["count"])
        return best


@pytest.fixture
def query(spark, tmp_path):
    return Query(spark, tmp_path)


def backend_options(name: str, tmp_path: Path) -> dict[str, Any]:
    if name == "heap":
        return {"state_backend": "heap", "state_storage": str(tmp_path / "state-storage")}
    return {"state_backend": "rocksdb", "state_storage": str(tmp_path / "state-storage"),
            "state_local_dir": str(tmp_path / "local")}


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_more_key_groups_is_refused_even_when_only_moved_keys_arrive(query, tmp_path, backend):
    state = backend_options(backend, tmp_path)
    # Keys whose key group is 4..7 of 8 were in key group (g - 4) of 4: after the change their state is elsewhere.
    moved = users_in_key_groups(8, lambda group: group >= 4, 3)
    query.add_input(rows(moved, 1))
    query.run(Tally(), **state)
    query.add_input(rows(moved, 2))

    message = query.refused(Tally(), **{**state, "num_key_groups": 8})

    assert "RestartSettingsChangedError" in message
    assert "written with num_key_groups=4, but it now runs with num_key_groups=8" in message
    assert "Restart with num_key_groups=4" in message and "bootstrap_keyed_state" in message
    query.run(Tally(), **state)  # the old setting continues: the refused run committed nothing
    assert query.counts() == {user: 2 for user in moved}


def test_key_group_layout_change_is_refused(query, tmp_path):
    users = ["ann", "bob", "cy"]
    query.add_input(rows(users, 1))
    query.run(Tally(), state_storage=str(tmp_path / "s"))
    query.add_input(rows(users, 2))

    message = query.refused(Tally(), state_storage=str(tmp_path / "s"), key_group_layout="identity")

    # The layouts group by columns of different types (bigint, int), so Spark's own state schema check refuses the
    # plan on the driver before our record is read.
    assert "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in message
    query.run(Tally(), state_storage=str(tmp_path / "s"))
    assert query.counts() == {user: 2 for user in users}


def test_key_type_change_is_refused_and_a_renamed_key_column_is_not(query, tmp_path):
    storage = {"state_storage": str(tmp_path / "s")}
    query.add_input(rows(["ann", "bob"], 1))
    query.run(Tally(), key_columns=("n",), **storage)
    query.add_input(rows(["ann", "bob"], 2))

    message = query.refused(Tally(), key_columns=("n",), transform=lambda f: f.withColumn("n", F.col("n").cast(
        "bigint")), **storage)

    assert "key column types (int), but it now runs with key column types (bigint)" in message
    assert "Cast the key columns back to int" in message
    query.run(Tally(), key_columns=("k",), transform=lambda f: f.withColumnRenamed("n", "k"), **storage)
    assert query.counts() == {"ann": 2, "bob": 2}  # keyed by n: ann is n=0, bob n=1


def test_state_backend_change_is_refused(query, tmp_path):
    query.add_input(rows(["ann"], 1))
    query.run(Tally(), **backend_options("heap", tmp_path))
    query.add_input(rows(["ann"], 2))

    message = query.refused(Tally(), **backend_options("rocksdb", tmp_path))

    assert "state_backend='heap', but it now runs with state_backend='rocksdb'" in message
    assert "Restart with state_backend='heap'" in message


def test_time_mode_change_is_refused(query, tmp_path):
    storage = {"state_storage": str(tmp_path / "s")}
    query.add_input(rows(["ann"], 1))
    query.run(Tally(), **storage)
    query.add_input(rows(["ann"], 2))

    message = query.refused(Tally(), time_mode="processing_time", **storage)

    assert "time_mode='event_time', but it now runs with time_mode='processing_time'" in message


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
@pytest.mark.parametrize("change, expected", [
    ({"count_type": Types.STRING()}, "stored with type value<LONG> but is now registered with type value<STRING>"),
    ({"as_list": True}, "was stored as value state but is now registered as list state"),
], ids=["type", "kind"])
def test_a_changed_state_declaration_is_refused_before_the_function_runs(query, tmp_path, backend, change,
                                                                         expected):
    state = backend_options(backend, tmp_path)
    query.add_input(rows(["ann"], 1))
    query.run(Tally(), **state)
    query.add_input(rows(["ann"], 2))

    message = query.refused(Tally(**change), **state)

    assert "RestartSettingsChangedError" in message and expected in message
    assert "read_keyed_state_frame" in message  # the way out when the old declaration cannot be kept
    if "count_type" in change:  # and the ways to keep the new type (docs/operations.md, "State schema evolution")
        assert "wider number type" in message and "enable_state_migration" in message
    query.run(Tally(), **state)
    assert query.counts() == {"ann": 2}


def test_an_added_state_starts_empty_and_the_old_states_continue(query, tmp_path):
    storage = {"state_storage": str(tmp_path / "s")}
    query.add_input(rows(["ann"], 1))
    query.run(Tally(), **storage)
    query.add_input(rows(["ann"], 2))
    query.run(Tally(extra_state=True), **storage)
    query.add_input(rows(["ann"], 3))
    query.run(Tally(), **storage)  # the added state is removed from the function again: its data is dropped

    assert query.counts() == {"ann": 3}


def test_a_first_batch_that_never_committed_does_not_pin_its_settings(query, tmp_path):
    storage = {"state_storage": str(tmp_path / "s")}
    query.add_input(rows(["ann"], 1))

    query.refused(Broken(), **storage)
    assert query.committed_batches() == 0
    query.run(Tally(), num_key_groups=8, **storage)  # the fixed version may choose other settings
    assert query.counts() == {"ann": 1}


class LoggedTally(Tally):
    def __init__(self, log_directory: str) -> None:
        super().__init__()
        self.log_directory = log_directory

    def open(self, runtime_context):
        log_warnings_to(self.log_directory)
        super().open(runtime_context)


def test_a_new_query_whose_first_batch_is_empty_records_its_settings_without_a_warning(query, tmp_path):
    storage = {"state_storage": str(tmp_path / "s")}
    logs = tmp_path / "logs"
    logs.mkdir()
    query.add_input([])  # batch 0 holds no rows, so no key-group call runs in it
    query.add_input(rows(["ann"], 1))
    query.run(LoggedTally(str(logs)), **storage)
    assert query.counts() == {"ann": 1}
    assert not [line for log in logs.iterdir() for line in log.read_text().splitlines() if "restart" in line]

    query.add_input(rows(["ann"], 2))
    assert "num_key_groups=4, but it now runs with num_key_groups=8" in query.refused(
        Tally(), num_key_groups=8, **storage)  # the record batch 1 wrote binds the restart


class CoTally(KeyedCoProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element1(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value["user"], count

    process_element2 = process_element1


def test_keyed_co_process_restart_with_more_key_groups_is_refused(query, tmp_path):
    def start(num_key_groups: int):
        output = keyed_co_process(query.source(), query.source(), ["user"], ["user"], CoTally(), OUTPUT,
                                  event_time_columns=("ts", "ts"), num_key_groups=num_key_groups,
                                  state_storage=str(tmp_path / "s"))
        return query._write(output)

    query.add_input(rows(["ann"], 1))
    first = start(4)
    first.processAllAvailable()
    first.stop()
    query.add_input(rows(["ann"], 2))
    second = start(8)
    with pytest.raises(StreamingQueryException, match="keyed_co_process cannot restart on this checkpoint.*"
                                                      "num_key_groups=4, but it now runs with num_key_groups=8"):
        second.awaitTermination(120)
    second.stop()


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_widened_state_type_continues_the_stored_values(query, tmp_path, backend):
    state = backend_options(backend, tmp_path)
    query.add_input(rows(["ann", "bob"], 1))
    query.run(Tally(count_type=Types.INT()), **state)
    query.add_input(rows(["ann"], 2))

    query.run(Tally(count_type=Types.LONG()), **state)

    assert query.counts() == {"ann": 2, "bob": 1}


def test_a_changed_uid_is_refused_in_rocksdb_mode_even_when_only_new_keys_arrive(query, tmp_path):
    query.add_input(rows(["ann", "bob"], 1))
    query.run(Tally(), uid="tally-v1", **backend_options("rocksdb", tmp_path))
    query.add_input(rows(["carl"], 2))  # a key with no state: nothing loads the old uid's files

    message = query.refused(Tally(), uid="tally-v2", **backend_options("rocksdb", tmp_path))

    assert "uid='tally-v1', but it now runs with uid='tally-v2'" in message
    assert "Keep uid='tally-v1'" in message and "savepoint" in message
