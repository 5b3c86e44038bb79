"""RocksDB mode names an operator's state directories by its uid; the default comes from the function's class name,
which must work for any class (and must not move the state of a class whose name always worked)."""

from __future__ import annotations

import re

import pytest

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError
from keyedstate.spark import keyed_process
from keyedstate.spark.state_backend_options import default_uid
from tests.spark.file_stream import start_query, write_input


def _make():
    class Count(KeyedProcessFunction):
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, value, ctx):
            count = (self.count.value() or 0) + 1
            self.count.update(count)
            yield value["user"], count

    return Count()


class Outer:
    class Inner(KeyedProcessFunction):
        pass


@pytest.mark.parametrize("qualname", ["Count", "Outer.Inner", "Job.<lambda>", "v2.Count-x", "_make.<locals>.Count",
                                      "__Private", "Zähler", "<locals>", "_" * 3, "A" * 250, "a.-b"])
def test_every_class_name_gives_a_valid_deterministic_uid_and_names_that_were_valid_keep_theirs(qualname):
    uid = default_uid(qualname)
    assert CheckpointStorage.check_scope(uid) == uid and uid == default_uid(qualname)
    legacy = qualname.replace("<", "").replace(">", "")
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}", legacy):
        assert uid == legacy  # existing checkpoints' state stays where it is


def test_names_that_used_to_be_refused_stay_readable_and_apart():
    assert default_uid("_make.<locals>.Count").startswith("make.locals.Count-")
    assert default_uid("_make.<locals>.Count") != default_uid("make.<locals>._Count")
    assert default_uid("Zähler") != default_uid("Zöhler")


@pytest.mark.spark
@pytest.mark.slow
def test_a_function_class_defined_inside_a_function_runs_in_rocksdb_mode_under_its_derived_uid(spark, tmp_path):
    write_input(tmp_path / "in", 0, [{"user": u, "ts": "2024-01-01T00:00:00Z"} for u in ("a", "b", "a")])
    storage = tmp_path / "state-storage"
    query = start_query(spark, tmp_path, _make(), schema="user STRING, ts TIMESTAMP", key_columns=["user"],
                        output_schema="user STRING, count BIGINT", query_name="local_class",
                        state_backend="rocksdb", state_storage=str(storage),
                        state_local_dir=str(tmp_path / "local"))
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(tuple(r) for r in spark.table("local_class").collect()) == [("a", 1), ("a", 2), ("b", 1)]
    uid = default_uid("_make.<locals>.Count")
    assert [p.name for p in storage.glob(f"*/{uid}")] == [uid]


@pytest.mark.spark
@pytest.mark.parametrize("uid, suggestion", [("a/b", "a_b"), ("_counts", "counts"), ("", "my-operator"),
                                             ("x" * 201, "x" * 200)])
def test_an_invalid_uid_states_the_rule_and_suggests_a_valid_one(spark, tmp_path, uid, suggestion):
    frame = spark.readStream.schema("user STRING, ts TIMESTAMP").json(str(tmp_path)).withWatermark("ts", "0 seconds")
    with pytest.raises(ConfigurationError) as failure:
        keyed_process(frame, ["user"], _make(), "user STRING, count BIGINT", event_time_column="ts",
                      state_backend="rocksdb", state_storage=str(tmp_path / "s"), uid=uid)
    message = str(failure.value)
    assert f"uid={uid!r} is not valid" in message
    assert "1-200 characters: letters, digits, '.', '_' or '-', and the first one a letter or digit" in message
    assert message.endswith(f"e.g. uid={suggestion!r}")
    CheckpointStorage.check_scope(suggestion)
