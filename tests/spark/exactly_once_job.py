"""A file-source -> keyed_process -> file-sink job the exactly-once test runs in a subprocess and kills.

    python exactly_once_job.py BASE_DIR STATE_STORE_PROVIDER [STATE_BACKEND]

STATE_BACKEND is keyed_process's ``heap`` (default) or ``rocksdb`` (state storage and local databases below BASE_DIR).

Environment: ``PAUSE_BATCH`` and ``PAUSE_AT`` (``element`` | ``timer``) make the function write ``BASE/paused`` and
hang inside that batch on the first attempt only, so the test can kill the job mid-batch at a known point.
``FAIL_BATCH`` makes the first attempt of every task of that batch raise after its third element, when it has
already written state, and runs Spark with task retries (``local[2,3]``), so the retried attempts must start from
the committed state again. ``SPARK_MASTER`` replaces the master (``local-cluster[2,1,1024]``: executors in their own
JVMs, each with its own local directory, so no local state database is shared; the pause marker then holds the pid of
the paused task's executor JVM). ``STATE_STORAGE`` and ``STATE_STORAGE_OPTIONS`` (JSON) replace RocksDB mode's
storage.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from pyspark import cloudpickle

from keyedstate import KeyedProcessFunction, ListStateDescriptor, MapStateDescriptor, Types, ValueStateDescriptor
from keyedstate.spark_compat import current_batch_id
from tests.spark.local_cluster import executor_jvm_pid, use_private_spark_home

if __name__ != "__main__":
    # imported by a test: Spark's workers cannot import the tests (run as a script they need not)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT_MS = 60_000
SCHEMA = "user STRING, payload STRING, ts TIMESTAMP"
OUTPUT = "user STRING, count BIGINT, payloads STRING, kinds STRING"


class CountingWithPause(KeyedProcessFunction):
    """Count, list and map state per key; emits when a key has been quiet for a minute of event time."""

    def __init__(self, base: str):
        self.base = base

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.payloads = runtime_context.get_list_state(ListStateDescriptor("payloads", Types.STRING()))
        self.kinds = runtime_context.get_map_state(MapStateDescriptor("kinds", Types.STRING(), Types.LONG()))
        self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.LONG()))

    def maybe_pause(self, where: str) -> None:
        marker = Path(self.base) / "paused"
        if os.environ.get("PAUSE_AT") == where and str(current_batch_id()) == os.environ.get("PAUSE_BATCH") \
                and not marker.exists():
            marker.write_text(f"{where} {executor_jvm_pid() if 'cluster' in os.environ.get('SPARK_MASTER', '') else 0}")
            time.sleep(600)  # the test kills the whole process group meanwhile

    def maybe_fail(self) -> None:
        from pyspark import TaskContext

        if str(current_batch_id()) == os.environ.get("FAIL_BATCH") and TaskContext.get().attemptNumber() == 0:
            self.elements_this_attempt = getattr(self, "elements_this_attempt", 0) + 1
            if self.elements_this_attempt > 3:
                Path(self.base, "failed-once").write_text("yes")
                raise RuntimeError("injected failure of a first task attempt")

    def process_element(self, value, ctx):
        self.maybe_pause("element")
        self.maybe_fail()
        self.count.update((self.count.value() or 0) + 1)
        self.payloads.add(value["payload"])
        kind = value["payload"].split("-")[0]
        self.kinds.put(kind, (self.kinds.get(kind) or 0) + 1)
        self.last.update(ctx.timestamp())
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + TIMEOUT_MS)
        return ()

    def on_timer(self, timestamp, ctx):
        self.maybe_pause("timer")
        if timestamp == self.last.value() + TIMEOUT_MS:
            kinds = ",".join(f"{k}={v}" for k, v in sorted(self.kinds.items()))
            yield ctx.get_current_key(), self.count.value(), "|".join(self.payloads.get()), kinds


def main() -> int:
    base, provider = sys.argv[1], sys.argv[2]
    backend = sys.argv[3] if len(sys.argv) > 3 else "heap"
    backend_arguments: dict = {"state_backend": backend}
    master = os.environ.get("SPARK_MASTER") or ("local[2,3]" if os.environ.get("FAIL_BATCH") else "local[2]")
    if backend == "rocksdb":
        backend_arguments.update(state_storage=os.environ.get("STATE_STORAGE", f"{base}/state-storage"))
        if "STATE_STORAGE_OPTIONS" in os.environ:
            backend_arguments["state_storage_options"] = json.loads(os.environ["STATE_STORAGE_OPTIONS"])
        if not master.startswith("local-cluster"):
            backend_arguments["state_local_dir"] = f"{base}/local-rocksdb"
    if master.startswith("local-cluster"):
        use_private_spark_home(Path(base) / "spark-home")
    from pyspark.sql import SparkSession

    conf = {
        "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass": provider,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    }
    if os.environ.get("KEYEDSTATE_TEST_SPARK_REMOTE"):  # the compatibility job's Spark Connect run
        from tests.local_spark import local_connect_session

        spark = local_connect_session(master, "exactly-once-job", conf)
    else:
        builder = SparkSession.builder.master(master).appName("exactly-once-job")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    run_job(spark, base, backend_arguments)
    spark.stop()
    return 0


def run_job(spark, base: str, backend_arguments: dict) -> None:
    """The job's query on ``spark``, until every input file is processed (also run in the tests' own session)."""
    from keyedstate.spark import keyed_process

    source = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(f"{base}/in")
              .withWatermark("ts", "0 seconds"))
    output = keyed_process(source, ["user"], CountingWithPause(base), OUTPUT, event_time_column="ts", num_key_groups=7,
                           **backend_arguments)
    query = (output.writeStream.format("json").option("path", f"{base}/out")
             .option("checkpointLocation", f"{base}/checkpoint").trigger(processingTime="100 milliseconds").start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()


if __name__ == "__main__":
    raise SystemExit(main())
