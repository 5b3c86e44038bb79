"""read_keyed_state_frame: a query's keyed state as a DataFrame decoded in the executors — the same content as
read_keyed_state, in both state backends, with typed columns where descriptors give types; and it never collects
the state to the driver."""

from __future__ import annotations

import pickle
import resource

import pytest

from keyedstate import KeyedProcessFunction, ListStateDescriptor, MapStateDescriptor, Types, ValueStateDescriptor
from keyedstate.errors import ConfigurationError
from keyedstate.spark import keyed_process, read_keyed_state, read_keyed_state_frame
from keyedstate.spark.state_frame import TIMERS_STATE, spark_type_of
from tests.spark.rocksdb_runs import run_batches

pytestmark = [pytest.mark.spark]

DESCRIPTORS = (
    ValueStateDescriptor("count", Types.LONG()),
    ListStateDescriptor("payloads", Types.STRING()),
    MapStateDescriptor("kinds", Types.STRING(), Types.LONG()),
)


def as_dict(frame, key_column: str = "key") -> dict:
    """The frame in read_keyed_state's shape: {key: {state: value, "__timers__": [(domain, ts), ...]}}."""
    typed = [field.name for field in frame.schema.fields if field.name not in (key_column, "state", "value", "timers")]
    result: dict = {}
    for row in frame.collect():
        states = result.setdefault(row[key_column], {})
        if row["state"] == TIMERS_STATE:
            states[TIMERS_STATE] = sorted((t["domain"], t["timestamp"]) for t in row["timers"])
        elif row["state"] in typed:
            value = row[row["state"]]
            states[row["state"]] = dict(value) if isinstance(value, dict) else value
        else:
            states[row["state"]] = pickle.loads(row["value"])
    return result


@pytest.fixture(scope="module", params=["heap", "rocksdb"])
def finished_query(request, spark, tmp_path_factory):
    base = tmp_path_factory.mktemp(request.param)
    backend = {"state_backend": "heap"} if request.param == "heap" else {
        "state_backend": "rocksdb", "state_storage": str(base / "state-storage"),
        "state_local_dir": str(base / "local")}
    run_batches(spark, base, range(5), **backend)
    checkpoint = str(base / "checkpoint")
    return checkpoint, read_keyed_state(spark, checkpoint)


def test_the_frame_holds_what_read_keyed_state_returns_with_typed_columns(spark, finished_query):
    checkpoint, expected = finished_query
    frame = read_keyed_state_frame(spark, checkpoint, descriptors=DESCRIPTORS, key_schema="key STRING")
    types = {field.name: field.dataType.simpleString() for field in frame.schema.fields}
    assert types == {"key": "string", "state": "string", "value": "binary", "count": "bigint",
                     "payloads": "array<string>", "kinds": "map<string,bigint>",
                     "timers": "array<struct<domain:string,timestamp:bigint>>"}
    assert len(expected) >= 5 and any(TIMERS_STATE in states for states in expected.values())
    assert as_dict(frame) == expected
    # a state without a descriptor ("last") comes pickled in 'value'; typed ones leave 'value' empty
    by_state = {row["state"]: row for row in frame.collect()}
    assert by_state["last"]["value"] is not None and by_state["count"]["value"] is None


def test_without_descriptors_or_key_schema_values_are_pickled_and_the_key_type_is_inferred(spark, finished_query):
    checkpoint, expected = finished_query
    frame = read_keyed_state_frame(spark, checkpoint)
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [
        ("key", "string"), ("state", "string"), ("value", "binary"),
        ("timers", "array<struct<domain:string,timestamp:bigint>>")]
    assert as_dict(frame) == expected
    assert frame.filter("state = 'count'").count() == sum("count" in states for states in expected.values())


def test_a_typed_column_clashing_with_a_key_column_is_refused_naming_both_fixes(spark, finished_query):
    checkpoint, _ = finished_query
    with pytest.raises(ConfigurationError, match=r"'count'.*key_schema with other column names"):
        read_keyed_state_frame(spark, checkpoint, descriptors=DESCRIPTORS, key_schema="count STRING")


def test_spark_types_of_keyedstate_types():
    assert spark_type_of("LONG") == "BIGINT"
    assert spark_type_of("LIST<MAP<STRING,DOUBLE>>") == "ARRAY<MAP<STRING, DOUBLE>>"
    assert spark_type_of("PICKLED_BYTE_ARRAY") is None and spark_type_of("TUPLE<LONG,STRING>") is None
    assert spark_type_of("MAP<STRING,PICKLED_BYTE_ARRAY>") is None


class OneLongPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        return ()


KEYS = 1_000_000


@pytest.mark.slow
def test_a_million_keys_are_read_without_collecting_them_to_the_driver(spark, tmp_path):
    source = spark.range(KEYS).selectExpr("concat('user-', CAST(id AS STRING)) AS user",
                                          "timestamp_millis(1704067200000 + id) AS ts")
    (source.write.parquet(str(tmp_path / "in")))
    stream = (spark.readStream.schema("user STRING, ts TIMESTAMP").parquet(str(tmp_path / "in"))
              .withWatermark("ts", "1 minute"))
    query = (keyed_process(stream, ["user"], OneLongPerKey(), "user STRING", event_time_column="ts",
                           num_key_groups=16)
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    frame = read_keyed_state_frame(spark, str(tmp_path / "checkpoint"), descriptors=DESCRIPTORS[:1])
    summary = frame.groupBy("state").agg({"count": "sum", "key": "count"}).collect()
    assert [(row["state"], row["count(key)"], row["sum(count)"]) for row in summary] == [("count", KEYS, KEYS)]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 100, f"the driver's Python process grew by {grown_mb:.0f} MB while reading the state frame"
