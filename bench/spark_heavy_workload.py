"""The state-heavy workload of the Spark benchmarks (bench/test_spark_bench.py): a few keys, each holding a
10,000-entry MapState; batch 0 fills the maps, every later batch touches (get + put) ``TOUCHES_PER_KEY`` entries of
every key. Variants ``keyed_process`` and ``tws`` (transformWithStateInPandas); one file per micro-batch.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from keyedstate import KeyedProcessFunction, MapStateDescriptor, Types
from spark_workloads import CACHE

HEAVY_KEYS = 4
HEAVY_ENTRIES = 10_000
TOUCHES_PER_KEY = 1_000
HEAVY_BATCHES = 6  # batch 0 fills the maps, batches 1.. touch them
HEAVY_SCHEMA = "key STRING, item BIGINT, amount BIGINT"
HEAVY_OUTPUT = "key STRING, entries BIGINT, total BIGINT"


def ensure_heavy_input(keys: int = HEAVY_KEYS, entries: int = HEAVY_ENTRIES, touches: int = TOUCHES_PER_KEY,
                       batches: int = HEAVY_BATCHES) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = CACHE / "data" / f"heavy-{keys}-{entries}-{touches}-{batches}"
    if (directory / "_DONE").exists():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    for batch in range(batches):
        if batch == 0:
            items = np.tile(np.arange(entries, dtype=np.int64), keys)
            key_idx = np.repeat(np.arange(keys), entries)
        else:
            items = rng.integers(0, entries, keys * touches, dtype=np.int64)
            key_idx = np.repeat(np.arange(keys), touches)
        table = pa.table({
            "key": pa.array([f"h{k}" for k in key_idx.tolist()], pa.string()),
            "item": pa.array(items, pa.int64()),
            "amount": pa.array(np.ones(len(items), dtype=np.int64)),
        })
        pq.write_table(table, directory / f"part-{batch:03d}.parquet")
        # distinct modification times keep the file source's order (one file per trigger)
        stamp = time.time() - 1000 + batch
        os.utime(directory / f"part-{batch:03d}.parquet", (stamp, stamp))
    (directory / "_DONE").write_text("ok")
    return directory


class MapTouch(KeyedProcessFunction):
    """Each element adds ``amount`` to entry ``item`` of its key's MapState (get + put); one output row per key and
    batch would need a timer, so none is emitted: the work is the state access."""

    def open(self, runtime_context):
        self.entries = runtime_context.get_map_state(MapStateDescriptor("entries", Types.LONG(), Types.LONG()))

    def process_element(self, value, ctx):
        entries = self.entries
        item = value.item
        entries.put(item, (entries.get(item) or 0) + value.amount)


def heavy_keyed_process_query(source):
    from keyedstate.spark import keyed_process

    return keyed_process(source, ["key"], MapTouch(), HEAVY_OUTPUT, time_mode="processing_time")


def _heavy_tws_processor_class():
    from pyspark.sql.streaming import StatefulProcessor

    class MapTouchProcessor(StatefulProcessor):
        def init(self, handle):
            self.entries = handle.getMapState("entries", "item BIGINT", "amount BIGINT")

        def handleInputRows(self, key, rows, timerValues):
            entries = self.entries
            for frame in rows:
                for item, amount in zip(frame["item"].tolist(), frame["amount"].tolist()):
                    current = entries.getValue((item,))
                    entries.updateValue((item,), ((current[0] if current else 0) + amount,))
            return iter([])

        def close(self):
            pass

    return MapTouchProcessor


def heavy_tws_query(source):
    return source.groupBy("key").transformWithStateInPandas(_heavy_tws_processor_class()(), HEAVY_OUTPUT, "Append",
                                                            "None")


HEAVY_VARIANTS: dict[str, Callable] = {"keyed_process": heavy_keyed_process_query, "tws": heavy_tws_query}


def heavy_source(spark, directory: Path):
    return spark.readStream.schema(HEAVY_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(directory))
