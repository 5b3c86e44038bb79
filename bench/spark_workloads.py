"""Workloads and competing implementations for the Spark end-to-end benchmarks (bench/test_spark_bench.py).

Count-with-timeout: count the events of every key and keep ONE event-time timer per key, 60 s after the key's last
event (Flink's ProcessFunction example with the previous timer deleted, so every variant holds exactly one timer per
key). The input is N events over K keys (every key gets N/K events, keys shuffled, event times ascending over one
hour), written once as Parquet, read as a stream with ``withWatermark`` and processed in ONE micro-batch.

Variants (same input, same Spark conf, same output schema ``key STRING, count BIGINT``):

* ``keyed_process``  keyedstate's ``keyed_process`` (128 key groups) with :class:`CountWithTimeout`.
* ``per_key``        hand-written ``applyInPandasWithState`` grouped by the user key.
* ``bucketed``       hand-written ``applyInPandasWithState`` grouped by ``pmod(xxhash64(key), 128)``: a msgpack'd
                     dict ``key -> [count, timer]`` in the bucket's state row, Spark's timeout = earliest timer.
* ``tws``            ``transformWithStateInPandas`` with a ValueState and one event-time timer per key.

The state-heavy workload (MapState, several batches) is in bench/spark_heavy_workload.py.

Every round is appended to ``$SPARK_BENCH_RESULTS`` (default .cache/spark-bench/results.jsonl; ``make bench`` points
it at bench/results/spark.jsonl); bench/report.py turns it into the Spark tables of bench/RESULTS.md and
bench/spark_scaling.png.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE = REPO_ROOT / ".cache" / "spark-bench"
# protobuf (transformWithStateInPandas needs it; keyedstate's own deps do not include it) and py-spy live here,
# installed with ``pip install --target .cache/bench-pylib "protobuf>=6.33.5,<7" py-spy``.
BENCH_PYLIB = REPO_ROOT / ".cache" / "bench-pylib"
RESULTS_FILE = CACHE / "results.jsonl"

TIMEOUT_MS = 60_000
BASE_TS_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z
SPAN_MS = 3_600_000  # the events' times cover one hour
NUM_BUCKETS = 128
OUTPUT_SCHEMA = "key STRING, count BIGINT"
INPUT_SCHEMA = "key STRING, ts TIMESTAMP"


@dataclass(frozen=True)
class Size:
    name: str
    events: int
    keys: int


SIZES = {
    "smoke": Size("smoke", 2_000, 500),
    "200k": Size("200k", 200_000, 50_000),
    "2M": Size("2M", 2_000_000, 500_000),
}

# ---------------------------------------------------------------------------------------------------------------
# environment and Spark session
# ---------------------------------------------------------------------------------------------------------------


def prepare_environment() -> None:
    """Before the SparkSession exists: workers use this interpreter and can import this module and protobuf."""
    paths = [str(REPO_ROOT), str(Path(__file__).resolve().parent)]
    if BENCH_PYLIB.is_dir():
        paths.append(str(BENCH_PYLIB))
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + [p for p in existing if p not in paths])
    for p in paths:
        if p not in sys.path:
            sys.path.append(p)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


SHUFFLE_PARTITIONS = 4


def bench_spark_conf() -> dict[str, str]:
    """The one conf every variant runs with."""
    from keyedstate.spark import recommended_spark_conf

    conf = recommended_spark_conf(shuffle_partitions=SHUFFLE_PARTITIONS, rocksdb=True)
    conf.update({
        # One micro-batch per input file set: no extra no-data batch after it (it would only fire timeouts, and
        # not the same number for every variant).
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        "spark.ui.enabled": "false",
        "spark.driver.memory": "3g",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stopTimeout": "60000",
    })
    return conf


def spark_session(warehouse: Path, extra_conf: Optional[dict[str, str]] = None):
    """The bench's local[2] session with :func:`bench_spark_conf`, plus ``extra_conf`` (one suite's own needs)."""
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("keyedstate-spark-bench")
    for key, value in {**bench_spark_conf(), **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.sql.warehouse.dir", str(warehouse))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


# ---------------------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------------------


def generate_events(size: Size, seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    """(key index per event, event time ms per event): every key exactly events/keys times, shuffled; ascending
    event times spread over SPAN_MS."""
    rng = np.random.default_rng(seed)
    key_index = np.arange(size.events, dtype=np.int64) % size.keys
    rng.shuffle(key_index)
    ts = BASE_TS_MS + np.sort(rng.integers(0, SPAN_MS, size.events, dtype=np.int64))
    return key_index, ts


def key_names(key_index: np.ndarray) -> list[str]:
    return [f"k{i:07d}" for i in key_index.tolist()]


def input_dir(size: Size) -> Path:
    return CACHE / "data" / f"count-{size.events}-{size.keys}"


def ensure_count_input(size: Size, files: int = 4) -> Path:
    """Write the Parquet input once (cached under .cache/spark-bench/data)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = input_dir(size)
    marker = directory / "_DONE"
    if marker.exists():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    key_index, ts = generate_events(size)
    keys = key_names(key_index)
    bounds = np.linspace(0, size.events, files + 1).astype(int)
    for part in range(files):
        lo, hi = bounds[part], bounds[part + 1]
        table = pa.table({
            "key": pa.array(keys[lo:hi], pa.string()),
            "ts": pa.array(ts[lo:hi], pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
        })
        pq.write_table(table, directory / f"part-{part:03d}.parquet")
    marker.write_text("ok")
    return directory


def ensure_count_csv(size: Size) -> Path:
    """The same events as ``key,ts_ms`` text lines, for the PyFlink job (FileSource + text lines)."""
    path = CACHE / "data" / f"count-{size.events}-{size.keys}.csv"
    if not path.exists():
        key_index, ts = generate_events(size)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as out:
            for k, t in zip(key_names(key_index), ts.tolist()):
                out.write(f"{k},{t}\n")
        tmp.rename(path)
    return path


def expected_counts(size: Size) -> dict[str, int]:
    key_index, _ = generate_events(size)
    counts = np.bincount(key_index, minlength=size.keys)
    return {f"k{i:07d}": int(c) for i, c in enumerate(counts.tolist())}


def count_source(spark, directory: Path, max_files_per_trigger: Optional[int] = None):
    reader = spark.readStream.schema(INPUT_SCHEMA)
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return reader.parquet(str(directory)).withWatermark("ts", "0 seconds")


# ---------------------------------------------------------------------------------------------------------------
# variant 1: keyed_process
# ---------------------------------------------------------------------------------------------------------------

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor  # noqa: E402


class CountWithTimeout(KeyedProcessFunction):
    """Flink's CountWithTimeoutFunction, keeping exactly one timer per key (the previous one is deleted)."""

    def open(self, runtime_context):
        self.state = runtime_context.get_state(ValueStateDescriptor("count", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx):
        current = self.state.value()
        timers = ctx.timer_service()
        timestamp = ctx.timestamp()
        if current is None:
            current = (0, timestamp)
        else:
            timers.delete_event_time_timer(current[1] + TIMEOUT_MS)
        last = max(current[1], timestamp)
        self.state.update((current[0] + 1, last))
        timers.register_event_time_timer(last + TIMEOUT_MS)

    def on_timer(self, timestamp, ctx):
        current = self.state.value()
        if current is not None and timestamp == current[1] + TIMEOUT_MS:
            self.state.clear()
            yield ctx.get_current_key(), current[0]


def keyed_process_query(source, num_key_groups: int = NUM_BUCKETS):
    from keyedstate.spark import keyed_process

    return keyed_process(source, ["key"], CountWithTimeout(), OUTPUT_SCHEMA, event_time_column="ts",
                         num_key_groups=num_key_groups)


def keyed_process_rocksdb_query(source, num_key_groups: int = NUM_BUCKETS):
    """keyed_process in RocksDB mode; every query gets its own state storage below the bench cache, removed when the
    bench's process exits (tens of MB per query at 2M events)."""
    import atexit
    import shutil
    import tempfile

    from keyedstate.spark import keyed_process

    CACHE.mkdir(parents=True, exist_ok=True)  # a fresh clone's first query may come before any input is written
    storage = tempfile.mkdtemp(prefix="state-storage-", dir=CACHE)
    atexit.register(shutil.rmtree, storage, True)
    return keyed_process(source, ["key"], CountWithTimeout(), OUTPUT_SCHEMA, event_time_column="ts",
                         num_key_groups=num_key_groups, state_backend="rocksdb", state_storage=storage)


# ---------------------------------------------------------------------------------------------------------------
# variant 2: applyInPandasWithState grouped by the user key
# ---------------------------------------------------------------------------------------------------------------


def _per_key_function(key: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
    import pandas as pd

    if state.hasTimedOut:
        count, _ = state.get
        state.remove()
        yield pd.DataFrame({"key": [key[0]], "count": [count]})
        return
    count, last = state.get if state.exists else (0, 0)
    for frame in frames:
        if len(frame):
            count += len(frame)
            last = max(last, int(frame["ts_ms"].max()))
    state.update((count, last))
    # Spark fires when timeout < watermark; the timer is due when its time <= watermark, hence -1.
    state.setTimeoutTimestamp(max(last + TIMEOUT_MS - 1, state.getCurrentWatermarkMs(), 1))


def per_key_query(source):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (source.withColumn("ts_ms", F.unix_millis("ts")).groupBy("key")
            .applyInPandasWithState(_per_key_function, OUTPUT_SCHEMA, "count BIGINT, last BIGINT", "append",
                                    GroupStateTimeout.EventTimeTimeout))


# ---------------------------------------------------------------------------------------------------------------
# variant 3: applyInPandasWithState grouped by 128 hash buckets, a dict of keys in the bucket's row
# ---------------------------------------------------------------------------------------------------------------


def _bucketed_function(bucket: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
    import msgpack
    import pandas as pd

    counts: dict = msgpack.unpackb(state.get[0], use_list=True) if state.exists else {}
    watermark = state.getCurrentWatermarkMs()
    out_keys: list = []
    out_counts: list = []
    # fire due timers (time <= watermark) of every key of the bucket
    if counts and watermark > 0:
        for k in [k for k, (_, timer) in counts.items() if timer <= watermark]:
            out_keys.append(k)
            out_counts.append(counts.pop(k)[0])
    for frame in frames:
        if not len(frame):
            continue
        grouped = frame.groupby("key", sort=False)["ts_ms"].agg(["size", "max"])
        for k, n, last in zip(grouped.index.tolist(), grouped["size"].tolist(), grouped["max"].tolist()):
            entry = counts.get(k)
            if entry is None:
                counts[k] = [n, last + TIMEOUT_MS]
            else:
                entry[0] += n
                entry[1] = max(entry[1], last + TIMEOUT_MS)
    if counts:
        state.update((msgpack.packb(counts),))
        earliest = min(timer for _, timer in counts.values())
        state.setTimeoutTimestamp(max(earliest - 1, watermark, 1))
    else:
        state.remove()
    if out_keys:
        yield pd.DataFrame({"key": out_keys, "count": out_counts})


def bucketed_query(source, buckets: int = NUM_BUCKETS):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    prepared = (source.withColumn("ts_ms", F.unix_millis("ts"))
                .withColumn("bucket", F.pmod(F.xxhash64("key"), F.lit(buckets)).cast("int")))
    return prepared.groupBy("bucket").applyInPandasWithState(
        _bucketed_function, OUTPUT_SCHEMA, "counts BINARY", "append", GroupStateTimeout.EventTimeTimeout)


# ---------------------------------------------------------------------------------------------------------------
# variant 4: transformWithStateInPandas
# ---------------------------------------------------------------------------------------------------------------


def _tws_processor_class():
    from pyspark.sql.streaming import StatefulProcessor

    class CountWithTimeoutProcessor(StatefulProcessor):
        def init(self, handle):
            self.handle = handle
            self.state = handle.getValueState("count", "count BIGINT, last BIGINT")

        def handleInputRows(self, key, rows, timerValues):
            count, last, previous = 0, 0, None
            if self.state.exists():
                count, last = self.state.get()
                previous = last + TIMEOUT_MS
            for frame in rows:
                if len(frame):
                    count += len(frame)
                    last = max(last, int(frame["ts_ms"].max()))
            if previous is not None and previous != last + TIMEOUT_MS:
                self.handle.deleteTimer(previous)
            self.state.update((count, last))
            self.handle.registerTimer(last + TIMEOUT_MS)
            return iter([])

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            import pandas as pd

            count, _ = self.state.get()
            self.state.clear()
            yield pd.DataFrame({"key": [key[0]], "count": [count]})

        def close(self):
            pass

    return CountWithTimeoutProcessor


def tws_query(source):
    from pyspark.sql import functions as F

    return (source.withColumn("ts_ms", F.unix_millis("ts")).groupBy("key")
            .transformWithStateInPandas(_tws_processor_class()(), OUTPUT_SCHEMA, "Append", "EventTime"))


COUNT_VARIANTS: dict[str, Callable] = {
    "keyed_process": keyed_process_query,
    "keyed_process_rocksdb": keyed_process_rocksdb_query,
    "per_key": per_key_query,
    "bucketed": bucketed_query,
    "tws": tws_query,
}

# ---------------------------------------------------------------------------------------------------------------
# running a query to completion and reading its progress
# ---------------------------------------------------------------------------------------------------------------


def run_available_now(output, checkpoint: Path, sink: str = "noop", query_name: Optional[str] = None) -> dict:
    """Run ``output`` with trigger(availableNow) until it stops; returns wall seconds and Spark's progress."""
    writer = output.writeStream.format(sink).outputMode("append").option("checkpointLocation", str(checkpoint))
    if query_name:
        writer = writer.queryName(query_name)
    started = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    wall = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    batches = [
        {
            "batch": p["batchId"],
            "rows": p["numInputRows"],
            "addBatch_ms": p["durationMs"].get("addBatch"),
            "trigger_ms": p["durationMs"].get("triggerExecution"),
            "state_rows": sum(op.get("numRowsTotal", 0) for op in p.get("stateOperators", [])),
            "state_bytes": sum(op.get("memoryUsedBytes", 0) for op in p.get("stateOperators", [])),
        }
        for p in (json.loads(q.json) for q in query.recentProgress)
        if p["numInputRows"] or p["durationMs"].get("addBatch")
    ]
    return {"wall_s": wall, "batches": batches}


def load_average() -> float:
    return os.getloadavg()[0]


def record(result: dict) -> None:
    # make bench points this at its run's results directory so the report reads only this run's rounds
    path = Path(os.environ.get("SPARK_BENCH_RESULTS", RESULTS_FILE))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as out:
        out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "csv":
        print(ensure_count_csv(SIZES[sys.argv[2]]))
