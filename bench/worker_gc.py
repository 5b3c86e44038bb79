"""What freezing a Spark Python worker's startup objects saves per micro-batch: the evidence for
``keyedstate.spark_compat.freeze_worker_startup_objects`` (docs/operations.md, "Tuning"). Run:
``.venv/bin/python bench/worker_gc.py [rounds]``.

The pipeline: Spark's rate source at 10,000 rows/s over 10,000 keys, ``keyed_process`` (heap, 128 key groups, 4
shuffle partitions, ``local[2]``) counting per key, the noop sink. Each run is 45 s in a new SparkContext (new
Python workers); *shipped* runs keyedstate as it is, *unfrozen* undoes the freeze in the function's ``open`` (which
runs after it in every worker) and stays unfrozen. The runs alternate, the order flipped every round. Per run:
Spark's median ``triggerExecution`` and ``addBatch`` of the batches after the first 8, and, from the workers, the
full collections they ran and the seconds those took."""

from __future__ import annotations

import gc
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from latency_workload import CountPerKey  # noqa: E402

RUN_SECONDS = 45
SKIPPED_BATCHES = 8


class CountsAndTimesCollections(CountPerKey):
    """``CountPerKey`` that records its worker's full collections in ``<log_directory>/<pid>.json``."""

    def __init__(self, log_directory: str, unfreeze: bool) -> None:
        self.log_directory = log_directory
        self.unfreeze = unfreeze

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        if self.unfreeze:
            gc.unfreeze()
        totals = {"full_collections": 0, "full_collection_s": 0.0}
        started: list[float] = []
        path = os.path.join(self.log_directory, f"{os.getpid()}.json")

        def timed(phase: str, info: dict) -> None:
            if info["generation"] != 2:
                return
            if phase == "start":
                started[:] = [time.perf_counter()]
                return
            totals["full_collections"] += 1
            totals["full_collection_s"] += time.perf_counter() - started[0]
            with open(path, "w") as out:
                json.dump(totals, out)

        gc.callbacks.append(timed)


def run(variant: str) -> dict:
    import pyspark.cloudpickle
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import latency_workload
    from keyedstate.spark import keyed_process

    pyspark.cloudpickle.register_pickle_by_value(latency_workload)
    pyspark.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", 4)
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    logs = tempfile.mkdtemp(prefix="worker-gc-")
    try:
        events = (spark.readStream.format("rate").option("rowsPerSecond", 10_000).load()
                  .select(F.format_string("k%d", F.col("value") % 10_000).alias("key"),
                          F.col("value").cast("string").alias("sent"), F.col("timestamp").alias("ts"))
                  .withWatermark("ts", "10 seconds"))
        output = keyed_process(events, ["key"], CountsAndTimesCollections(logs, variant == "unfrozen"),
                               "key string, value string", event_time_column="ts", num_key_groups=128, uid="gc")
        query = output.writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp()).start()
        time.sleep(RUN_SECONDS)
        query.stop()
        progress = query.recentProgress[SKIPPED_BATCHES:]
        workers = []
        for path in glob.glob(os.path.join(logs, "*.json")):
            with open(path) as log:
                workers.append(json.load(log))
        return {
            "batches": len(progress),
            **{f"{name}_ms": statistics.median(p["durationMs"].get(name, 0) for p in progress)
               for name in ("triggerExecution", "addBatch")},
            "full_collections": sum(w["full_collections"] for w in workers),
            "full_collection_s": round(sum(w["full_collection_s"] for w in workers), 2),
        }
    finally:
        spark.stop()  # the next run starts new Python workers


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    results: dict[str, list[dict]] = {"shipped": [], "unfrozen": []}
    for round_number in range(rounds):
        for variant in (("shipped", "unfrozen") if round_number % 2 else ("unfrozen", "shipped")):
            result = run(variant)
            results[variant].append(result)
            print(f"round {round_number}: {variant}: {result}", flush=True)
    for variant, runs in results.items():
        print(f"{variant}: median triggerExecution {statistics.median(r['triggerExecution_ms'] for r in runs)} ms "
              f"over {rounds} runs", flush=True)


if __name__ == "__main__":
    # run under its module name, not __main__, so the function class pickles by value as a module's
    import worker_gc

    worker_gc.main()
