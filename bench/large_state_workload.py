"""The large-state workload (issue 17) of bench/test_large_state_bench.py: many keys, each holding a ~80-byte
ValueState record and ONE pending event-time timer; batch 0 fills N keys, every later batch changes a few thousand of
them (new value, timer moved forward). The timers sit 30 days after their event and the events span hours, so no
timer fires while measuring: what is left is the cost of state that is large but mostly untouched.

Variants (same files, same Spark conf as bench/spark_workloads.py):

``heap`` (keyed_process, row mode: a key group's whole state in its Spark state row), ``rocksdb`` (RocksDB mode: a
local RocksDB per key group, changelogs to ``state_storage``), ``rocksdb_kg8`` (the same with ``num_key_groups=8``),
``rocksdb_s3`` (RocksDB mode with ``state_storage`` on a local S3-compatible server, S3Proxy with its filesystem
backend under the run's scratch directory, started by the run), ``tws`` (transformWithStateInPandas with a
ValueState and one event-time timer per key).

Every run is its own process (``python bench/large_state_workload.py --variant ...``, started by the test): a fresh
JVM and fresh Python workers, whose peak memory (VmHWM) then belongs to that run alone. Files are fed one at a time
and the run waits for each batch's progress, so the directories can be sampled between batches while nothing runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import spark_workloads as W  # noqa: E402
from inspect_memory import measure_inspection  # noqa: E402
from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor  # noqa: E402
from keyedstate.spark import SnapshotPolicy  # noqa: E402
from run_sampling import WorkerMemory, bytes_written, files_under, new_bases  # noqa: E402

# In any run of this many later batches every key group writes exactly one base (each batch touches every key group);
# with LARGE_STATE_BENCH_SNAPSHOT_SPREAD each key group's cycle has its own length, so one on average
BASE_CYCLE = SnapshotPolicy().max_changelogs + 1
# SnapshotPolicy.spread of the RocksDB variants (0: the default policy)
SNAPSHOT_SPREAD = float(os.environ.get("LARGE_STATE_BENCH_SNAPSHOT_SPREAD", "0"))

VARIANTS = ("heap", "rocksdb", "rocksdb_kg8", "rocksdb_s3", "tws")
FEW_KEY_GROUPS = 8  # rocksdb_kg8: num_key_groups near the shuffle partition count (4), as docs/spark.md suggests
TIMEOUT_MS = 30 * 24 * 3_600_000  # far beyond the events' span: timers stay pending
BATCH_SPACING_MS = 60_000  # later batch b has event times in [SPAN + b min, SPAN + (b+1) min): never late
# variants whose checkpoint the inspector reads after the last measured batch (its driver memory: issue 33)
INSPECT_VARIANTS = tuple(v.strip() for v in os.environ.get("LARGE_STATE_BENCH_INSPECT", "heap,rocksdb").split(",")
                         if v.strip())
# 200k and 4M show whether its driver memory grows with the keys; every size would add minutes of full state reads
INSPECT_SIZES = tuple(v.strip() for v in os.environ.get("LARGE_STATE_BENCH_INSPECT_SIZES", "smoke,200k,4M").split(",")
                      if v.strip())
PAYLOAD_HEX_CHARS = 64  # pickled (payload, ts) tuple ~85 bytes; tws's UnsafeRow (payload, last) 88 bytes
INPUT_SCHEMA = "key STRING, ts TIMESTAMP, payload STRING"
OUTPUT_SCHEMA = "key STRING, payload STRING, last BIGINT"
POLL_S = 0.1


@dataclass(frozen=True)
class Size:
    name: str
    keys: int
    changes: int  # keys changed per later batch
    # batches the fill is split into: 40M keys in one micro-batch would measure Spark's shuffle of 3 GB, not state
    fill_batches: int = 1


SIZES = {
    "smoke": Size("smoke", 20_000, 2_000),
    "200k": Size("200k", 200_000, 10_000),
    "1M": Size("1M", 1_000_000, 10_000),
    "4M": Size("4M", 4_000_000, 10_000),
    # issue 35's large-state target; its own make target (bench-40m), about 30 minutes, outside make bench
    "40M": Size("40M", 40_000_000, 10_000, fill_batches=10),
}

# --- input: one Parquet file per micro-batch, cached under .cache/spark-bench/data ------------------------------------

_HEX = np.array([f"{i:02x}".encode() for i in range(256)], dtype="S2")


def batch_columns(size: Size, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key index, event time ms, payload bytes) of one batch; deterministic, so validation can recompute it.
    Batches below ``size.fill_batches`` fill the keys, each a slice of one permutation with event times after the
    previous slice's, so no fill event is late."""
    rng = np.random.default_rng(1000 + batch)
    if batch < size.fill_batches:
        if size.fill_batches == 1:
            index = rng.permutation(size.keys)
        else:
            index = np.array_split(np.random.default_rng(999).permutation(size.keys), size.fill_batches)[batch]
        span = W.SPAN_MS // size.fill_batches
        ts = W.BASE_TS_MS + batch * span + rng.integers(0, span, len(index))
    else:
        index = rng.choice(size.keys, size.changes, replace=False)
        ts = W.BASE_TS_MS + W.SPAN_MS + batch * BATCH_SPACING_MS + rng.integers(0, BATCH_SPACING_MS, len(index))
    raw = np.frombuffer(rng.bytes(len(index) * PAYLOAD_HEX_CHARS // 2), dtype=np.uint8)
    payload = _HEX[raw].reshape(len(index), PAYLOAD_HEX_CHARS // 2).view(f"S{PAYLOAD_HEX_CHARS}").ravel()
    return index, ts, payload


def _write(path: Path, keys: list[str], ts: np.ndarray, payload: np.ndarray) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({
        "key": pa.array(keys, pa.string()),
        "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
        "payload": pa.array(payload, pa.binary()).cast(pa.string()),
    }), path)


def ensure_input(size: Size, later_batches: int) -> list[Path]:
    """The fill files, ``later_batches`` change files, then two sentinel files (used only to validate)."""
    fill = size.fill_batches
    directory = W.CACHE / "data" / (f"large-state-{size.keys}-{size.changes}-{later_batches}"
                                    + (f"-fill{fill}" if fill > 1 else ""))
    files = [directory / f"part-{b:03d}.parquet" for b in range(fill + later_batches + 2)]
    if (directory / "_DONE").exists():
        return files
    directory.mkdir(parents=True, exist_ok=True)
    for batch in range(fill + later_batches):
        index, ts, payload = batch_columns(size, batch)
        _write(files[batch], W.key_names(index), ts, payload)
    # the first sentinel moves the watermark past every timer; timers fire in the batch after it
    sentinel = W.BASE_TS_MS + W.SPAN_MS + (fill + later_batches + 1) * BATCH_SPACING_MS + TIMEOUT_MS
    for offset, path in enumerate(files[-2:]):
        _write(path, ["sentinel"], np.array([sentinel + offset]), np.array([b"-"]))
    (directory / "_DONE").write_text("ok")
    return files


def expected_output(size: Size, later_batches: int) -> dict[str, tuple[str, int]]:
    """key -> (payload, ts) of its last change: what its timer emits once the sentinels pass."""
    final: dict[str, tuple[str, int]] = {}
    for batch in range(size.fill_batches + later_batches):
        index, ts, payload = batch_columns(size, batch)
        final.update(zip(W.key_names(index), zip((p.decode() for p in payload.tolist()), ts.tolist())))
    return final


# --- the variants -----------------------------------------------------------------------------------------------------


class LatestWithTimer(KeyedProcessFunction):
    """Keeps the key's latest (payload, ts) and one timer TIMEOUT_MS after it; the previous timer is deleted."""

    def open(self, runtime_context):
        self.state = runtime_context.get_state(ValueStateDescriptor("latest", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx):
        timers = ctx.timer_service()
        current = self.state.value()
        if current is not None:
            timers.delete_event_time_timer(current[1] + TIMEOUT_MS)
        timestamp = ctx.timestamp()
        self.state.update((value.payload, timestamp))
        timers.register_event_time_timer(timestamp + TIMEOUT_MS)

    def on_timer(self, timestamp, ctx):
        current = self.state.value()
        if current is not None and timestamp == current[1] + TIMEOUT_MS:
            self.state.clear()
            yield ctx.get_current_key(), current[0], current[1]


def keyed_process_query(source, variant: str, scratch: Path, s3: Any = None):
    from keyedstate.spark import keyed_process

    extra = {} if variant == "heap" else {
        "state_backend": "rocksdb", "state_storage": str(scratch / "storage"),
        "state_local_dir": str(scratch / "local")}
    if variant == "rocksdb_kg8":
        extra["num_key_groups"] = FEW_KEY_GROUPS
    if variant != "heap" and SNAPSHOT_SPREAD:
        extra["snapshot_policy"] = SnapshotPolicy(spread=SNAPSHOT_SPREAD)
    if s3 is not None:
        extra.update(state_storage=f"s3://{s3.new_bucket()}/state", state_storage_options=s3.storage_options())
    return keyed_process(source, ["key"], LatestWithTimer(), OUTPUT_SCHEMA, event_time_column="ts", **extra)


def _tws_processor_class():
    from pyspark.sql.streaming import StatefulProcessor

    class LatestWithTimerProcessor(StatefulProcessor):
        def init(self, handle):
            self.handle = handle
            self.state = handle.getValueState("latest", "payload STRING, last BIGINT")

        def handleInputRows(self, key, rows, timerValues):
            previous = self.state.get()[1] if self.state.exists() else None
            latest = None
            for frame in rows:
                if len(frame):
                    row = frame.loc[frame["ts_ms"].idxmax()]
                    if latest is None or row["ts_ms"] > latest[1]:
                        latest = (row["payload"], int(row["ts_ms"]))
            if latest is not None:
                if previous is not None:
                    self.handle.deleteTimer(previous + TIMEOUT_MS)
                self.state.update(latest)
                self.handle.registerTimer(latest[1] + TIMEOUT_MS)
            return iter([])

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            import pandas as pd

            payload, last = self.state.get()
            self.state.clear()
            yield pd.DataFrame({"key": [key[0]], "payload": [payload], "last": [last]})

        def close(self):
            pass

    return LatestWithTimerProcessor


def tws_query(source):
    from pyspark.sql import functions as F

    return (source.withColumn("ts_ms", F.unix_millis("ts")).groupBy("key")
            .transformWithStateInPandas(_tws_processor_class()(), OUTPUT_SCHEMA, "Append", "EventTime"))


def build_query(variant: str, source, scratch: Path, s3: Any = None):
    return tws_query(source) if variant == "tws" else keyed_process_query(source, variant, scratch, s3)


def start_s3_server(scratch: Path) -> Any:
    """S3Proxy whose objects are files below ``scratch/storage``, so durable bytes are sampled as for the others."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from s3proxy_server import S3ProxyServer, s3proxy_jar

    server = S3ProxyServer(s3proxy_jar(), scratch / "storage")
    server.start()
    return server


# --- one run: fill, later batches, optional validation ----------------------------------------------------------------


def _await_batch(query, batch: int) -> dict:
    while True:
        for p in (json.loads(q.json) for q in query.recentProgress):
            if p["batchId"] == batch and p["numInputRows"]:
                return p
        if not query.isActive:
            raise RuntimeError(f"query stopped before batch {batch}: {query.exception()}")
        time.sleep(POLL_S)


def _check_output(variant: str, got: dict, expected: dict) -> None:
    if got != expected:
        wrong = sorted(k for k in expected.keys() | got.keys() if got.get(k) != expected.get(k))
        raise AssertionError(f"{variant}: {len(wrong)} keys wrong after the timers fired, e.g. "
                             f"{[(k, got.get(k), expected.get(k)) for k in wrong[:3]]}")


def run_variant(variant: str, size: Size, later_batches: int, scratch: Path, validate: bool) -> dict:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # Spark's console progress bar would glue the progress lines bench/run.py echoes onto its own
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    spark = W.spark_session(scratch / "warehouse")
    files = ensure_input(size, later_batches)
    inbox, checkpoint = scratch / "in", scratch / "chk"
    inbox.mkdir(parents=True)
    durable = {"checkpoint": checkpoint, "storage": scratch / "storage"}

    def feed(path: Path) -> None:
        # the file must appear whole: a hard link does, copying nothing (the 4M fill file is ~330 MB); across file
        # systems a copy beside the input directory is renamed into it
        try:
            os.link(path, inbox / path.name)
        except OSError:
            shutil.copyfile(path, scratch / path.name)
            os.replace(scratch / path.name, inbox / path.name)

    name = f"large_state_{variant}_{uuid.uuid4().hex[:8]}"
    source = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(inbox))
    s3 = start_s3_server(scratch) if variant == "rocksdb_s3" else None
    output = build_query(variant, source.withWatermark("ts", "0 seconds"), scratch, s3)
    batches = []
    with WorkerMemory() as memory:
        feed(files[0])
        started = time.perf_counter()
        query = (output.writeStream.format("memory").queryName(name).outputMode("append")
                 .option("checkpointLocation", str(checkpoint)).trigger(processingTime="100 milliseconds").start())
        before = {what: files_under(path) for what, path in durable.items()}
        for batch in range(size.fill_batches + later_batches):
            if batch:
                started = time.perf_counter()
                feed(files[batch])
            progress = _await_batch(query, batch)
            wall = time.perf_counter() - started
            after = {what: files_under(path) for what, path in durable.items()}
            written = {f"{what}_bytes": bytes_written(before[what], after[what]) for what in durable}
            batches.append({"batch": batch, "rows": progress["numInputRows"], "wall_s": round(wall, 3),
                            "trigger_ms": progress["durationMs"].get("triggerExecution"),
                            "addBatch_ms": progress["durationMs"].get("addBatch"),
                            "durable_bytes": sum(written.values()), **written,
                            "bases": new_bases(before["storage"], after["storage"])})
            before = after
            bases = batches[-1]["bases"]
            print(f"[large-state] {variant} {size.name} batch {batch}: {progress['numInputRows']:,} rows, "
                  f"{batches[-1]['trigger_ms'] / 1000:.2f} s, {batches[-1]['durable_bytes'] / 1e6:.2f} MB durable"
                  + (f", {len(bases)} bases uploading {sum(u for u, _ in bases) / 1e6:.1f} of "
                     f"{sum(t for _, t in bases) / 1e6:.1f} MB" if bases else ""), flush=True)
        memory.sample()
        fired = spark.table(name).count()
        if fired:
            raise AssertionError(f"{variant}: {fired} timers fired while measuring; they must stay pending")
        if validate:
            for batch, path in enumerate(files[-2:], size.fill_batches + later_batches):
                feed(path)
                _await_batch(query, batch)
            _check_output(variant, {r["key"]: (r["payload"], r["last"]) for r in spark.table(name).collect()},
                          expected_output(size, later_batches))
        query.stop()
    inspected = {}
    if variant in INSPECT_VARIANTS and size.name in INSPECT_SIZES:
        # the last measured batch: every key with its value and one timer (validation's later batches fire them)
        inspected = measure_inspection(spark, checkpoint, size.fill_batches + later_batches - 1, size.keys,
                                       s3.storage_options() if s3 is not None else None)
        print(f"[large-state] {variant} {size.name}: inspector {inspected['inspect_s']:.1f} s, driver Python peak "
              f"{inspected['inspect_driver_python_peak_mb']:.1f} MB", flush=True)
    spark.stop()
    if s3 is not None:
        s3.kill()
    return {**summarize(variant, size, batches, memory.peaks, validate, scratch), **inspected}


def summarize(variant: str, size: Size, batches: list[dict], peaks: dict[int, int], validated: bool,
              scratch: Path) -> dict:
    fill, later = batches[:size.fill_batches], batches[size.fill_batches:]
    # the first later batch is a warm-up (first call of each worker after the fill); bytes keep every later batch,
    # so whatever a batch sets off for later (a base snapshot) is amortized over all of them
    timed = later[1:] or later

    def per_later_batch(field: str) -> float:
        return sum(b[field] for b in later) / len(later)

    # After a fill the databases still merge the fill's files; the first bases after it upload that once. Runs with
    # two base cycles or more also report the last cycle alone: what a batch costs once that has settled.
    steady = later[-BASE_CYCLE:] if len(later) >= 2 * BASE_CYCLE else []

    return {
        "variant": variant, "size": size.name, "keys": size.keys, "changes": size.changes,
        "later_batches": len(later), "fill_batches": len(fill), "fill_s": sum(b["trigger_ms"] for b in fill) / 1000,
        "later_median_s": statistics.median(b["trigger_ms"] for b in timed) / 1000,
        "later_wall_median_s": statistics.median(b["wall_s"] for b in timed),
        **{f"{what}_bytes_per_later_batch": per_later_batch(f"{what}_bytes")
           for what in ("durable", "checkpoint", "storage")},
        "steady_batches": len(steady),
        # base snapshots written in those batches, and how many uploaded more than half of their database
        **{f"{name}_bases": sum(len(b.get("bases", ())) for b in window) for name, window in
           (("later", later), ("steady", steady))},
        **{f"{name}_whole_bases": sum(1 for b in window for up, total in b.get("bases", ()) if up * 2 > total)
           for name, window in (("later", later), ("steady", steady))},
        "steady_durable_bytes_per_batch": sum(b["durable_bytes"] for b in steady) / len(steady) if steady else None,
        "peak_worker_mb": max(peaks.values(), default=0) * 1024 / 1e6, "workers": len(peaks),  # VmHWM is in KiB
        # what is left at the end (the local RocksDB databases are not durable: reported, never counted)
        "final_dir_bytes": {d: sum(s for _, s in files_under(scratch / d).values())
                            for d in ("chk", "storage", "local")},
        "validated": validated, "batches": batches,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="one large-state run (see the module docstring)")
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--size", choices=sorted(SIZES), required=True)
    parser.add_argument("--later-batches", type=int, default=6)
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--validate", action="store_true")
    options = parser.parse_args(argv)
    if options.later_batches < 1:
        parser.error("--later-batches must be at least 1 (the per-batch figures are over the later batches)")
    W.prepare_environment()
    summary = run_variant(options.variant, SIZES[options.size], options.later_batches, options.scratch,
                          options.validate)
    options.result.write_text(json.dumps(summary))
    return 0


if __name__ == "__main__":
    # run under its module name, not __main__, so the functions pickle the same way as when imported
    import large_state_workload

    sys.exit(large_state_workload.main())
