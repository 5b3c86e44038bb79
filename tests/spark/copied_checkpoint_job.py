"""A second Spark application running a copy of a checkpoint: the workload of tests/spark/rocksdb_runs.py, one more
batch, with the state storage the test names.

    python copied_checkpoint_job.py BASE_DIR STATE_STORAGE BATCH GO_FILE

The application starts (and starts its Python workers) at once, then waits for GO_FILE to exist before it runs the
query: the test starts it early, so a JVM's start-up overlaps the test's own work.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.spark.rocksdb_runs import SMALL_POLICY, run_batches


def main() -> int:
    base, storage, batch, go = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").appName("copied-checkpoint")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("keyedstate.spark.rocksdb_mode")).count()
    deadline = time.monotonic() + 600
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} did not appear")
        time.sleep(0.05)
    run_batches(spark, base, range(batch, batch + 1), state_backend="rocksdb", state_storage=storage,
                state_local_dir=str(base / "local"), snapshot_policy=SMALL_POLICY)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
