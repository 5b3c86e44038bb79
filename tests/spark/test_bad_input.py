"""Wrong input and wrong code get errors that name the key, the key group and the batch; the checkpoint stays
usable once the code is fixed."""

from __future__ import annotations

from typing import Any

import pytest

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.errors import ConfigurationError
from keyedstate.spark import keyed_process
from tests.spark.file_stream import failure_message, start_query, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "user STRING, payload STRING, ts TIMESTAMP"


class Count(KeyedProcessFunction):
    """Counts per key and emits the running count; raises on payload 'boom' unless fixed."""

    def __init__(self, fail_on_boom: bool = False, bad_output: bool = False):
        self.fail_on_boom = fail_on_boom
        self.bad_output = bad_output

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        if self.fail_on_boom and value["payload"] == "boom":
            raise ValueError("cannot handle boom")
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield (value["user"], "not a number" if self.bad_output else count)


def run_until_failure(spark, tmp_path, function, rows, name, input_index: int = 0, **kwargs: Any) -> str:
    write_input(tmp_path / "in", input_index, rows)
    return failure_message(start_query(spark, tmp_path, function, schema=SCHEMA, key_columns=["user"],
                                       output_schema="user STRING, count BIGINT", query_name=name,
                                       sink_path=tmp_path / "out", **kwargs))


def test_a_null_key_names_the_key_group_and_batch(spark, tmp_path, state_backend):
    message = run_until_failure(spark, tmp_path, Count(),
                                [{"user": None, "payload": "x", "ts": "2024-01-01T00:00:00Z"}],
                                "null_key", **state_backend)
    assert "NullKeyError" in message and "null key" in message
    assert "key group" in message and "batch 0" in message


def test_event_time_column_must_exist_and_be_a_timestamp(spark, tmp_path):
    frame = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    with pytest.raises(ConfigurationError, match="'missing' is not in the DataFrame"):
        keyed_process(frame, ["user"], Count(), "user STRING, count BIGINT", event_time_column="missing")
    with pytest.raises(ConfigurationError, match="'payload' has type string; it must be a timestamp"):
        keyed_process(frame, ["user"], Count(), "user STRING, count BIGINT", event_time_column="payload")
    with pytest.raises(ConfigurationError, match="needs event_time_column"):
        keyed_process(frame, ["user"], Count(), "user STRING, count BIGINT")
    with pytest.raises(ConfigurationError, match="'nope'"):
        keyed_process(frame, ["nope"], Count(), "user STRING, count BIGINT", event_time_column="ts")


def test_output_that_does_not_match_the_schema_names_the_column(spark, tmp_path, state_backend):
    message = run_until_failure(spark, tmp_path, Count(bad_output=True),
                                [{"user": "a", "payload": "x", "ts": "2024-01-01T00:00:00Z"}], "bad_output",
                                **state_backend)
    assert "InvalidOutputError" in message and "'count'" in message and "not a number" in message
    assert "key group" in message and "batch 0" in message


def test_a_user_exception_names_function_key_and_element_and_the_checkpoint_survives(spark, tmp_path, state_backend):
    rows = [{"user": "a", "payload": "ok", "ts": "2024-01-01T00:00:00Z"},
            {"user": "b", "payload": "boom", "ts": "2024-01-01T00:00:01Z"}]
    message = run_until_failure(spark, tmp_path, Count(fail_on_boom=True), rows, "user_error", **state_backend)
    assert "UserFunctionError" in message and "Count.process_element failed for key 'b'" in message
    assert "boom" in message and "ValueError: cannot handle boom" in message
    assert "key group" in message and "batch 0" in message

    # The fixed function resumes from the same checkpoint and processes the failed batch exactly once.
    query = start_query(spark, tmp_path, Count(), schema=SCHEMA, key_columns=["user"],
                        output_schema="user STRING, count BIGINT", sink_path=tmp_path / "out", **state_backend)
    try:
        query.processAllAvailable()
        write_input(tmp_path / "in", 1, [{"user": "b", "payload": "again", "ts": "2024-01-01T00:00:02Z"}])
        query.processAllAvailable()
    finally:
        query.stop()
    output = spark.read.schema("user STRING, count BIGINT").json(str(tmp_path / "out")).collect()
    assert sorted(tuple(r) for r in output) == [("a", 1), ("b", 1), ("b", 2)]


def failure_after_restart(spark, tmp_path, first: dict, second: dict) -> str:
    """Run 20 keys with the ``first`` keyed_process arguments, then restart from the same checkpoint with the
    ``second``: the message the restarted query fails with."""
    rows = [{"user": f"u{i}", "payload": "x", "ts": "2024-01-01T00:00:00Z"} for i in range(20)]
    write_input(tmp_path / "in", 0, rows)
    query = start_query(spark, tmp_path, Count(), schema=SCHEMA, key_columns=["user"],
                        output_schema="user STRING, count BIGINT", sink_path=tmp_path / "out", **first)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return run_until_failure(spark, tmp_path, Count(), rows, "restarted", input_index=1, **second)


def test_restarting_with_another_number_of_key_groups_is_refused(spark, tmp_path, state_backend):
    message = failure_after_restart(spark, tmp_path, {"num_key_groups": 7, **state_backend},
                                    {"num_key_groups": 5, **state_backend})
    assert "num_key_groups=7" in message and "num_key_groups=5" in message


def test_restarting_with_another_key_group_layout_is_refused_by_sparks_state_schema_check(spark, tmp_path,
                                                                                          state_backend):
    # The layouts group by columns of different types (int, bigint), so the new layout can never silently read the
    # old rows as empty state: Spark compares the key schema with the checkpoint's before the first batch runs.
    message = failure_after_restart(spark, tmp_path, {"key_group_layout": "identity", **state_backend}, state_backend)
    first_run = spark.read.schema("user STRING, count BIGINT").json(str(tmp_path / "out")).collect()
    assert sorted(tuple(r) for r in first_run) == sorted((f"u{i}", 1) for i in range(20))
    assert "key schema" in message and "_keyedstate_key_group,IntegerType" in message
    assert "_keyedstate_key_group,LongType" in message


def test_restarting_with_another_state_backend_is_refused(spark, tmp_path, state_backend):
    other = "heap" if state_backend["state_backend"] == "rocksdb" else "rocksdb"
    other_arguments = {"state_backend": other}
    if other == "rocksdb":
        other_arguments["state_storage"] = str(tmp_path / "state-storage")
    message = failure_after_restart(spark, tmp_path, state_backend, other_arguments)
    assert f"written with state_backend='{state_backend['state_backend']}'" in message
    assert f"now runs with state_backend='{other}'" in message and "key group" in message and "batch" in message


def test_rocksdb_only_options_and_bad_values_are_refused_before_the_query_starts(spark, tmp_path):
    frame = spark.readStream.schema(SCHEMA).json(str(tmp_path)).withWatermark("ts", "0 seconds")
    arguments = ("user STRING, count BIGINT",)
    with pytest.raises(ConfigurationError, match="state_backend must be one of 'heap', 'rocksdb', got 'disk'"):
        keyed_process(frame, ["user"], Count(), *arguments, event_time_column="ts", state_backend="disk")
    with pytest.raises(ConfigurationError, match="state_local_dir only apply with state_backend='rocksdb'"):
        keyed_process(frame, ["user"], Count(), *arguments, event_time_column="ts", state_local_dir=str(tmp_path))
    with pytest.raises(ConfigurationError, match="uid=.a/b. is not valid"):
        keyed_process(frame, ["user"], Count(), *arguments, event_time_column="ts", state_backend="rocksdb",
                      state_storage=str(tmp_path / "s"), uid="a/b")
    with pytest.raises(ConfigurationError, match="state_storage 'nosuchscheme://x' is not usable"):
        keyed_process(frame, ["user"], Count(), *arguments, event_time_column="ts", state_backend="rocksdb",
                      state_storage="nosuchscheme://x")


class LastSeen(KeyedProcessFunction):
    """Emits each element's key, event time (a TIMESTAMP output column) and running count."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value["user"], value["ts"], count


def test_a_timestamp_output_column_carries_the_elements_times(spark, tmp_path):
    import datetime as dt

    write_input(tmp_path / "in", 0, [{"user": "a", "payload": "x", "ts": "2024-01-01T00:00:00Z"},
                                     {"user": "a", "payload": "y", "ts": "2024-01-01T00:00:05Z"}])
    query = start_query(spark, tmp_path, LastSeen(), schema=SCHEMA, key_columns=["user"],
                        output_schema="user STRING, seen TIMESTAMP, count BIGINT", sink_path=tmp_path / "out")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.read.schema("user STRING, seen TIMESTAMP, count BIGINT").json(str(tmp_path / "out")).collect()
    utc = dt.timezone.utc
    assert sorted((r.user, r.seen.astimezone(utc), r["count"]) for r in rows) == [
        ("a", dt.datetime(2024, 1, 1, 0, 0, 0, tzinfo=utc), 1), ("a", dt.datetime(2024, 1, 1, 0, 0, 5, tzinfo=utc), 2)]
