"""keyed_process's metrics in the query's progress (``lastProgress["observedMetrics"]["keyedstate.<uid>"]``), read
back against inputs whose counts are known: in both state backends, on keyed_co_process, and through the
exporters (a Prometheus endpoint scraped and JSON lines read while the query runs). The compatibility job runs the
first test on Spark 3.5, 4.0 and through Spark Connect."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.request

import pytest

from keyedstate import KeyedCoProcessFunction, KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.keygroups import key_group_of_key
from keyedstate.spark import (
    JsonLinesMetricsListener,
    PrometheusMetricsListener,
    keyed_co_process,
    keyed_process_metrics_name,
    keyed_state_metrics,
)
from tests.spark.file_stream import read_batches, start_query, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
SCHEMA = "user STRING, ts TIMESTAMP, register BIGINT, remove BIGINT, ptimer BIGINT"
OUTPUT = "user STRING, n BIGINT"
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def row(user: str, ts: int, register: int = 0, remove: int = 0, ptimer: int = 0) -> dict:
    """An element that registers the event-time timer ``register``, deletes ``remove`` and registers the
    processing-time timer ``ptimer`` (0: none; a null would reach the function as NaN)."""
    return {"user": user, "ts": iso(ts), "register": register, "remove": remove, "ptimer": ptimer}


class TimersOnRequest(KeyedProcessFunction):
    """Counts each key's elements (one output per element) and registers / deletes the timers each element names;
    every firing timer outputs one record."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        timers = ctx.timer_service()
        if value["register"]:
            timers.register_event_time_timer(value["register"])
        if value["remove"]:
            timers.delete_event_time_timer(value["remove"])
        if value["ptimer"]:
            timers.register_processing_time_timer(value["ptimer"])
        yield value["user"], self.count.value()

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), -1


# Three batches through one key group (num_key_groups=1), so every count is over all keys. Watermark delay 0: batch
# 1 runs at watermark T0+2 (batch 0's latest event), batch 2 at T0+15000.
BATCHES = [
    [row("a", T0, register=T0 + 10_000), row("a", T0 + 1, register=T0 + 20_000),
     row("b", T0 + 2, register=T0 + 10_000, ptimer=1_000)],
    [row("c", T0 + 15_000, remove=T0 + 99)],
    [row("a", T0 + 3, remove=T0 + 20_000)],
]
# per batch: (in, out, late, watermark, registered, deleted, fired, pending)
EXPECTED = [
    # b's processing-time timer at 1000 is overdue and fires at the end of its call
    (3, 3 + 1, 0, 0, 4, 0, 1, 3),
    # a deletion of a timer that was never registered counts as a deletion call
    (1, 1, 0, T0 + 2, 0, 1, 0, 3),
    # the watermark fires a's and b's timers at T0+10000; a's element is late and deletes a's other timer
    (1, 1 + 2, 1, T0 + 15_000, 0, 1, 2, 0),
]
KEYS_WITH_STATE = [2, 3, 3]
COUNTED = ("numRecordsIn", "numRecordsOut", "numLateRecords", "currentWatermark", "numRegisteredTimers",
           "numDeletedTimers", "numExpiredTimers", "numPendingTimers")


def metrics_by_batch(query, name: str) -> dict[int, dict]:
    found = {}
    for progress in query.recentProgress:
        metrics = keyed_state_metrics(progress)
        if name in metrics:
            found[int(progress["batchId"])] = metrics[name]
    return found


def start_without_no_data_batches(spark, start):
    """``start()`` a query that runs a batch only for new data: a batch that only moves the watermark would take
    the timers that are due out of the next data batch, at a moment that depends on the machine's speed."""
    spark.conf.set(NO_DATA_BATCHES, "false")  # read when the query starts
    try:
        return start()
    finally:
        spark.conf.unset(NO_DATA_BATCHES)


def run_batches(spark, base, batches, **kwargs):
    write_input(base / "in", 0, batches[0])  # the source needs its directory
    query = start_without_no_data_batches(spark, lambda: start_query(
        spark, base, TimersOnRequest(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT, num_key_groups=1,
        **kwargs))
    try:
        for index, rows in enumerate(batches):
            write_input(base / "in", index, rows)
            query.processAllAvailable()
        return metrics_by_batch(query, "TimersOnRequest"), read_batches(base / "checkpoint")
    finally:
        query.stop()


def data_batches(metrics: dict[int, dict]) -> list[dict]:
    """The batches that ran the function (Spark may add a no-data batch to move the watermark)."""
    return [metrics[batch] for batch in sorted(metrics) if metrics[batch]["numKeyGroups"] > 0]


def test_each_metric_in_the_progress_counts_what_the_batches_did(spark, tmp_path, state_backend):
    name = f"metrics_{state_backend['state_backend']}"
    metrics, spark_batches = run_batches(spark, tmp_path, BATCHES, query_name=name, **state_backend)
    assert keyed_process_metrics_name(TimersOnRequest()) == "keyedstate.TimersOnRequest"
    batches = data_batches(metrics)
    assert [tuple(batch[name] for name in COUNTED) for batch in batches] == EXPECTED
    rocksdb = state_backend["state_backend"] == "rocksdb"
    for batch, elements, keys in zip(batches, (3, 1, 1), KEYS_WITH_STATE):
        if rocksdb:  # RocksDB's estimate: a key written in two batches can count twice until a compaction
            assert keys <= batch["numKeysWithState"] <= 2 * keys
        else:
            assert batch["numKeysWithState"] == keys
        assert batch["numKeyGroups"] == 1
        assert batch["maxRecordsPerKeyGroup"] == batch["medianRecordsPerKeyGroup"] == elements
        assert batch["stateSizeBytes"] > 0 and batch["stateBytesWritten"] > 0
        if rocksdb:  # RocksDB's live SST and memtable bytes; changelogs, and a base now and then
            assert 0 <= batch["stateBaseBytesWritten"] <= batch["stateBytesWritten"]
        else:  # the key group's row is the state and what is written
            assert batch["stateSizeBytes"] == batch["stateBytesWritten"]
            assert batch["stateBaseBytesWritten"] == 0
        assert batch["keyedStateTimeMs"] > 0
        assert min(batch["userFunctionTimeMs"], batch["stateRestoreTimeMs"], batch["timerProcessingTimeMs"]) >= 0
    # the overdue processing-time timer (at 1000) fired in batch 0, at that batch's timestamp
    assert batches[0]["processingTimeTimerLagMs"] == spark_batches[0].timestamp - 1_000
    assert batches[1]["processingTimeTimerLagMs"] is None
    # without calls a batch reports zeros
    for values in metrics.values():
        if values["numKeyGroups"] == 0:
            assert values["numRecordsIn"] == 0 and values["currentWatermark"] is None
    # the metric rows are observed, then filtered out of the stream: the output is the function's alone
    output = spark.table(name)
    assert output.columns == ["user", "n"]
    assert sorted(tuple(r) for r in output.collect()) == [
        ("a", -1), ("a", 1), ("a", 2), ("a", 3), ("b", -1), ("b", -1), ("b", 1), ("c", 1)]


class Pair(KeyedCoProcessFunction):
    """Outputs every element of both inputs; counts nothing."""

    def process_element1(self, value, ctx):
        yield value["user"], 1

    def process_element2(self, value, ctx):
        yield value["user"], 2


def test_keyed_co_process_reports_both_inputs_late_elements_and_key_group_skew(spark, tmp_path):
    num_key_groups = 8
    users = {}
    for index in range(200):  # three users in three different key groups
        user = f"u{index}"
        users.setdefault(key_group_of_key(user, num_key_groups), user)
        if len(users) == 3:
            break
    x, y, z = users.values()
    # batch 0: x has 4 elements, y 2, z 1 (of both inputs); the watermark then moves to T0+50000
    write_input(tmp_path / "first", 0, [{"user": u, "ts": iso(T0 + i)} for i, u in enumerate([x, x, x, y])])
    write_input(tmp_path / "second", 0, [{"user": u, "ts": iso(T0 + 50_000 + i)} for i, u in enumerate([x, y, z])])
    first = spark.readStream.schema("user STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1).json(
        str(tmp_path / "first")).withWatermark("ts", "0 seconds")
    second = spark.readStream.schema("user STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1).json(
        str(tmp_path / "second")).withWatermark("ts", "0 seconds")
    out = keyed_co_process(first, second, ["user"], ["user"], Pair(), OUTPUT, event_time_columns=("ts", "ts"),
                           num_key_groups=num_key_groups)
    query = (out.writeStream.format("memory").queryName("co_metrics")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
        # batch 1 (watermark T0+3, the first input's): two late elements of the first input, one on time
        write_input(tmp_path / "first", 1, [{"user": x, "ts": iso(T0 + 1)}, {"user": y, "ts": iso(T0 + 2)}])
        write_input(tmp_path / "second", 1, [{"user": z, "ts": iso(T0 + 60_000)}])
        query.processAllAvailable()
        metrics = data_batches(metrics_by_batch(query, "Pair"))
    finally:
        query.stop()
    assert [(m["numRecordsIn"], m["numRecordsOut"], m["numLateRecords"], m["numKeyGroups"]) for m in metrics] == [
        (7, 7, 0, 3), (3, 3, 2, 3)]
    # elements per key group in batch 0: 4, 2, 1 (Spark's percentile_approx gives an element of the data)
    assert (metrics[0]["maxRecordsPerKeyGroup"], metrics[0]["medianRecordsPerKeyGroup"]) == (4, 2)
    assert metrics[1]["currentWatermark"] == T0 + 3
    assert all(m["numKeysWithState"] == 0 and m["numPendingTimers"] == 0 for m in metrics)


def test_the_exporters_serve_prometheus_and_write_json_lines_while_the_query_runs(spark, tmp_path):
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    json_path = tmp_path / "metrics.jsonl"
    listeners = [PrometheusMetricsListener(registry), JsonLinesMetricsListener(str(json_path))]
    for listener in listeners:
        spark.streams.addListener(listener)
    write_input(tmp_path / "in", 0, BATCHES[0])
    query = start_without_no_data_batches(spark, lambda: start_query(
        spark, tmp_path, TimersOnRequest(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
        num_key_groups=1, query_name="exported"))
    try:
        for index, rows in enumerate(BATCHES):
            write_input(tmp_path / "in", index, rows)
            query.processAllAvailable()
        # onQueryProgress runs shortly after each batch's commit: wait for the last data batch's line
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            lines = [json.loads(line) for line in json_path.read_text().splitlines()] if json_path.exists() else []
            if sum(line["numRecordsIn"] for line in lines) == 5:
                break
            time.sleep(0.2)
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read().decode()
        assert query.isActive
    finally:
        query.stop()
        for listener in listeners:
            spark.streams.removeListener(listener)
        listeners[1].close()
        server.shutdown()
    assert {line["query"] for line in lines} == {"exported"}
    assert {line["operator"] for line in lines} == {"TimersOnRequest"}
    assert sum(line["numRecordsIn"] for line in lines) == 5
    assert sum(line["numExpiredTimers"] for line in lines) == 3
    labels = '{operator="TimersOnRequest",query="exported"}'
    assert f"keyedstate_records_in_total{labels} 5.0" in scraped
    assert f"keyedstate_timers_expired_total{labels} 3.0" in scraped
    assert f"keyedstate_late_records_total{labels} 1.0" in scraped
    assert f"keyedstate_keys_with_state{labels} 3.0" in scraped
    watermark = [line for line in scraped.splitlines() if line.startswith(f"keyedstate_watermark_seconds{labels}")]
    assert [float(line.split()[-1]) for line in watermark] == [(T0 + 15_000) / 1000]
