"""Spark 4.2+'s offline repartition of a stopped query's state (``StreamingCheckpointManager.repartition``) on a
keyed_process checkpoint: the restarted query continues every key's state and timers, and with the balanced
key-group layout each key group runs in partition ``key group mod the new partition count``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.keygroups import key_group_of_columns
from tests.spark.conftest import ROCKSDB_PROVIDER
from tests.spark.file_stream import read_batches, replay_in_harness, start_query, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "user STRING, ts TIMESTAMP"
OUTPUT = "user STRING, count BIGINT, partition INT"
NUM_KEY_GROUPS = 16
PARTITIONS = "spark.sql.shuffle.partitions"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
USERS = [f"user-{i}" for i in range(12)]


class CountAndRemind(KeyedProcessFunction):
    """Counts per key; every element sets a timer one second later, whose firing reports the count (negated)."""

    def open(self, runtime_context):
        self.runtime_context = runtime_context
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 1_000)
        yield value["user"], count, self.runtime_context.get_index_of_this_subtask()

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), -(self.count.value() or 0), self.runtime_context.get_index_of_this_subtask()


def batch_rows(index: int) -> list[dict]:
    users = USERS[index % 3::2] if index % 2 else USERS
    return [{"user": user, "ts": f"2026-01-01T00:{index:02d}:00Z"} for user in users]


def outputs(base: Path, skip: frozenset[str] = frozenset()) -> list[tuple[str, int, int]]:
    # The repartition batch is missing from the file sink's _spark_metadata, so the part files are read directly.
    return [(r["user"], r["count"], r["partition"]) for path in sorted((base / "out").glob("part-*.json"))
            if path.name not in skip for r in map(json.loads, path.read_text().splitlines())]


def run(spark, base: Path, inputs: list[list[dict]], first: int, last: int, state: dict) -> None:
    for index in range(first, last):
        write_input(base / "in", index, inputs[index])
    query = start_query(spark, base, CountAndRemind(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
                        num_key_groups=NUM_KEY_GROUPS, sink_path=base / "out", **state)
    try:
        query.processAllAvailable()
    finally:
        query.stop()


@pytest.fixture
def shuffle_partitions(spark):
    """Sets the session's partition count; Spark's repartition needs its RocksDB state store provider."""
    previous = {key: spark.conf.get(key, None) for key in (PARTITIONS, PROVIDER, CHANGELOG)}
    spark.conf.set(PROVIDER, ROCKSDB_PROVIDER)
    spark.conf.set(CHANGELOG, "true")
    yield lambda count: spark.conf.set(PARTITIONS, str(count))
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


@pytest.mark.skipif(not hasattr(__import__("pyspark.sql", fromlist=["SparkSession"]).SparkSession,
                                "_streamingCheckpointManager"),
                    reason="Spark's offline repartition exists from Spark 4.2; older Spark rescales via a new query")
@pytest.mark.parametrize("before, after", [(2, 4), (4, 2)])
def test_repartitioned_checkpoint_continues_every_key_and_spreads_key_groups_evenly(
        spark, tmp_path, state_backend, shuffle_partitions, before, after):
    inputs = [batch_rows(i) for i in range(6)]
    shuffle_partitions(before)
    run(spark, tmp_path, inputs, 0, 3, state_backend)
    files_before = frozenset(path.name for path in (tmp_path / "out").glob("part-*.json"))

    spark._streamingCheckpointManager.repartition(str(tmp_path / "checkpoint"), after)
    shuffle_partitions(after)  # Spark takes the count from the checkpoint; the session agrees here for clarity
    run(spark, tmp_path, inputs, 3, 6, state_backend)

    result = outputs(tmp_path)
    batches = read_batches(tmp_path / "checkpoint")
    expected = replay_in_harness(CountAndRemind(), lambda e: e["user"], batches, inputs,
                                 to_value=lambda row: row, key_of=lambda row: row["user"],
                                 timestamp_of=lambda row: _millis(row["ts"]))
    assert Counter((user, count) for user, count, _ in result) == Counter((user, count) for user, count, _ in expected)
    later = outputs(tmp_path, skip=files_before)
    assert later, "the restarted query produced nothing"
    # Key group g runs in partition g mod the partition count, before and after: equal shares of key groups.
    for user, _, partition in later:
        assert partition == key_group_of_columns([user], ["string"], NUM_KEY_GROUPS) % after


def _millis(iso: str) -> int:
    import datetime as dt

    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
