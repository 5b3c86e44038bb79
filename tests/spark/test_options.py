"""KeyedProcessOptions: every option is checked once, when the object is built, with the message the entry points
give; the entry points build it from their options object and keyword arguments, and the functions they run see
``job_parameters``."""

from __future__ import annotations

import dataclasses

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from keyedstate import KeyedCoProcessFunction, KeyedProcessFunction, RocksDBOptions
from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.errors import ConfigurationError
from keyedstate.spark import KeyedProcessOptions, SnapshotPolicy, keyed_co_process
from keyedstate.spark.group_function import _RUNTIMES, GroupRuntime, cached_runtime
from keyedstate.spark.group_spec import GroupFunctionSpec
from keyedstate.spark.options import PROCESSING_TIME
from keyedstate.spark.output_frames import OutputLayout
from tests.spark.file_stream import start_query, write_input


def test_the_defaults_are_keyed_processs_defaults():
    options = KeyedProcessOptions()
    assert (options.time_mode, options.num_key_groups, options.key_group_layout, options.state_backend) == (
        "event_time", 128, "balanced", "heap")
    assert options.progress_metrics and not options.emit_metrics and options.metric_rows
    assert options.state_storage_options == StorageOptions()


@pytest.mark.parametrize("arguments, message", [
    ({"time_mode": "wall_clock"}, "time_mode must be 'event_time' or 'processing_time', got 'wall_clock'"),
    ({"num_key_groups": 0}, "num_key_groups must be an int between 1 and 32768, got 0"),
    ({"num_key_groups": True}, "num_key_groups must be an int between 1 and 32768, got True"),
    ({"key_group_layout": "random"}, "key_group_layout must be one of 'balanced', 'identity', got 'random'"),
    ({"processing_time_poll_interval_ms": 0}, "processing_time_poll_interval_ms must be a positive int"),
    ({"state_backend": "disk"}, "state_backend must be one of 'heap', 'rocksdb', got 'disk'"),
    ({"state_local_dir": "/tmp/x", "snapshot_policy": SnapshotPolicy()},
     "state_local_dir, snapshot_policy only apply with state_backend='rocksdb'"),
    ({"state_backend": "rocksdb", "rocksdb_options": {"compression": "lz4"}},
     "rocksdb_options must be a keyedstate.RocksDBOptions, got dict"),
    ({"state_backend": "rocksdb", "snapshot_policy": 3}, "snapshot_policy must be a keyedstate.spark.SnapshotPolicy"),
    ({"uid": "a/b"}, "uid='a/b' is not valid: a uid is 1-200 characters"),
    ({"state_storage": ""}, "state_storage must be a path or URI string, got ''"),
    ({"state_storage_options": {"retry": 1}}, "unknown state_storage_options \\['retry'\\]"),
    ({"slow_call_warning_ms": 0}, "slow_call_warning_ms must be a positive int of milliseconds \\(or None\\), got 0$"),
    ({"slow_call_warning_ms": 2.5}, "slow_call_warning_ms must be a positive int .*, got 2.5"),
])
def test_a_bad_option_is_refused_when_the_options_are_built(arguments, message):
    with pytest.raises(ConfigurationError, match=message):
        KeyedProcessOptions(**arguments)


def test_group_by_user_key_is_num_key_groups_none_and_rocksdb_takes_its_own_options():
    assert KeyedProcessOptions(num_key_groups=None).num_key_groups is None
    options = KeyedProcessOptions(state_backend="rocksdb", rocksdb_options=RocksDBOptions(),
                                  snapshot_policy=SnapshotPolicy(), state_local_dir="/tmp/x")
    assert options.rocksdb_options == RocksDBOptions()


def test_storage_options_are_parsed_once_and_the_object_is_frozen():
    options = KeyedProcessOptions(state_storage_options={"retry_seconds": 5})
    assert options.state_storage_options == StorageOptions.parse({"retry_seconds": 5})
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.uid = "other"  # type: ignore[misc]


def test_an_entry_points_keyword_arguments_replace_the_fields_of_its_options_object():
    shared = KeyedProcessOptions(time_mode="processing_time", num_key_groups=4, uid="counter")
    options = KeyedProcessOptions.of("keyed_process", shared, {"num_key_groups": 8})
    assert (options.time_mode, options.num_key_groups, options.uid) == ("processing_time", 8, "counter")
    assert KeyedProcessOptions.of("keyed_process", None, {"uid": "x"}) == KeyedProcessOptions(uid="x")
    with pytest.raises(ConfigurationError, match="num_key_groups must be an int between 1 and 32768, got 0"):
        KeyedProcessOptions.of("keyed_process", shared, {"num_key_groups": 0})


def test_an_unknown_keyword_argument_is_refused_with_the_closest_field():
    with pytest.raises(ConfigurationError, match="keyed_process got an unknown option 'num_key_group'; did you mean "
                                                 "'num_key_groups'\\? The options keyed_process takes are "
                                                 "KeyedProcessOptions' fields: time_mode, num_key_groups, "):
        KeyedProcessOptions.of("keyed_process", None, {"num_key_group": 8})
    with pytest.raises(ConfigurationError, match="got an unknown option 'colour'\\. The options"):
        KeyedProcessOptions.of("keyed_process", None, {"colour": "red"})
    with pytest.raises(ConfigurationError, match="options must be a KeyedProcessOptions, got dict"):
        KeyedProcessOptions.of("keyed_process", {"uid": "x"}, {})  # type: ignore[arg-type]


def test_an_entry_point_sets_its_fixed_fields_and_takes_only_the_fields_it_accepts():
    shared = KeyedProcessOptions(num_key_groups=4, progress_metrics=True, emit_metrics=True, uid="query")
    options = KeyedProcessOptions.of("bootstrap_keyed_state", shared, {"state_backend": "rocksdb"},
                                     accepted=("num_key_groups", "state_backend"), uid="bootstrap")
    assert (options.num_key_groups, options.state_backend, options.uid) == (4, "rocksdb", "bootstrap")
    assert not options.emit_metrics  # not accepted: the default, whatever the shared options say
    with pytest.raises(ConfigurationError, match="apply_in_pandas_with_state_args sets progress_metrics itself"):
        KeyedProcessOptions.of("apply_in_pandas_with_state_args", None, {"progress_metrics": True},
                               progress_metrics=False)
    with pytest.raises(ConfigurationError, match="unknown option 'emit_metrics'.*takes are KeyedProcessOptions' "
                                                 "fields: num_key_groups, state_backend$"):
        KeyedProcessOptions.of("bootstrap_keyed_state", None, {"emit_metrics": True},
                               accepted=("num_key_groups", "state_backend"))


@pytest.mark.parametrize("parameters", [{"threshold": 10}, ["threshold"], {1: "x"}])
def test_job_parameters_are_strings(parameters):
    with pytest.raises(ConfigurationError, match="job_parameters must be a dict of str to str"):
        KeyedProcessOptions(job_parameters=parameters)


class Greets(KeyedProcessFunction):
    def open(self, runtime_context):
        self.greeting = runtime_context.get_job_parameter("greeting", "no greeting")

    def process_element(self, value, ctx):
        yield value.user, self.greeting


@pytest.mark.spark
def test_a_keyed_process_function_reads_the_job_parameters_on_spark(spark, tmp_path):
    write_input(tmp_path / "in", 0, [{"user": "a", "ts": "2024-01-01T00:00:00Z"},
                                      {"user": "b", "ts": "2024-01-01T00:00:01Z"}])
    query = start_query(spark, tmp_path, Greets(), schema="user STRING, ts TIMESTAMP", key_columns=["user"],
                        output_schema="user STRING, greeting STRING", query_name="job_parameters",
                        job_parameters={"greeting": "hi"})
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(tuple(row) for row in spark.table("job_parameters").collect()) == [("a", "hi"), ("b", "hi")]


def test_the_group_runtime_gives_the_function_the_job_parameters_or_the_default():
    layout = OutputLayout(StructType([StructField("user", StringType()), StructField("greeting", StringType())]))
    seen = []
    for parameters in ({"greeting": "hello"}, None):
        spec = GroupFunctionSpec(f"job-parameters-{parameters}", ("user",), ("user",), "_kg", None, layout,
                                 KeyedProcessOptions(time_mode=PROCESSING_TIME, job_parameters=parameters))
        try:
            runtime = cached_runtime(spec.runtime_id, lambda spec=spec: GroupRuntime(spec, Greets()))
            seen.append(runtime.operator.function.greeting)
        finally:
            _RUNTIMES.pop(spec.runtime_id, None)
    assert seen == ["hello", "no greeting"]


@pytest.mark.spark
def test_keyed_co_process_checks_the_job_parameters_too(spark):
    frame = spark.createDataFrame([("a",)], "user STRING")
    with pytest.raises(ConfigurationError, match="job_parameters must be a dict of str to str"):
        keyed_co_process(frame, frame, ["user"], ["user"], GreetsBoth(), "user STRING",
                         time_mode="processing_time", job_parameters={"greeting": 1})


class GreetsBoth(KeyedCoProcessFunction):
    def process_element1(self, value, ctx):
        yield (value.user,)

    def process_element2(self, value, ctx):
        yield (value.user,)
