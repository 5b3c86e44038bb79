"""A small RocksDB-mode workload shared by the RocksDB-mode Spark tests: 13 users, value, list and map state and a
timer per key, one input file per micro-batch; :func:`run_batches` runs a range of batches against a checkpoint."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from pyspark import cloudpickle

from keyedstate import KeyedProcessFunction, ListStateDescriptor, MapStateDescriptor, Types, ValueStateDescriptor
from keyedstate.state.rocksdb.versions import SnapshotPolicy
from tests.spark.file_stream import start_query, write_input

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers cannot import the tests

BATCHES = 8  # what heap_run (tests/spark/conftest.py) ran
T0 = 1_704_067_200_000
SCHEMA = "user STRING, payload STRING, ts TIMESTAMP"
OUTPUT = "user STRING, count BIGINT, payloads STRING"
# Two changelogs per base: every few batches a key group writes a new base, so runs exercise both.
SMALL_POLICY = SnapshotPolicy(max_changelogs=2, min_changelog_bytes=1)


class CountListAndQuiet(KeyedProcessFunction):
    """Value, list and map state per key and a timer a minute after the key's last element."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.payloads = runtime_context.get_list_state(ListStateDescriptor("payloads", Types.STRING()))
        self.kinds = runtime_context.get_map_state(MapStateDescriptor("kinds", Types.STRING(), Types.LONG()))
        self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.payloads.add(value["payload"])
        self.kinds.put(value["payload"][0], (self.kinds.get(value["payload"][0]) or 0) + 1)
        self.last.update(ctx.timestamp())
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 60_000)
        return ()

    def on_timer(self, timestamp, ctx):
        if timestamp == self.last.value() + 60_000:
            yield ctx.get_current_key(), self.count.value(), "|".join(self.payloads.get())
            self.count.clear()
            self.payloads.clear()


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def batch_rows(index: int) -> list[dict]:
    # four of thirteen users per batch: most keys stay quiet long enough for their timers to fire
    return [{"user": f"u{(index * 3 + i % 4) % 13}", "payload": f"{'abc'[i % 3]}{index}-{i}",
             "ts": iso(T0 + index * 25_000 + i * 300)} for i in range(12)]


def run_batches(spark, base: Path, batches: range, between=None, **backend) -> None:
    (base / "in").mkdir(parents=True, exist_ok=True)
    query = start_query(spark, base, CountListAndQuiet(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
                        sink_path=base / "out", **backend)
    try:
        for index in batches:
            write_input(base / "in", index, batch_rows(index))
            query.processAllAvailable()
            if between is not None:
                between()
    finally:
        query.stop()


def output_of(spark, base: Path) -> list[tuple]:
    return sorted(tuple(row) for row in spark.read.schema(OUTPUT).json(str(base / "out")).collect())
