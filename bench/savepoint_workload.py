"""The savepoint workload (issue 31) of bench/test_savepoint_bench.py, on the large-state workload's data and function
(bench/large_state_workload.py: N keys, each with a ~80-byte ValueState record and one pending event-time timer),
RocksDB mode:

1. **fill**: a query fills the N keys from their events in one batch (``triggerExecution`` of that batch);
2. **write**: the query is stopped and ``write_savepoint`` writes its state to a savepoint (wall time; savepoint
   size = its row files and RocksDB base files);
3. **restore**: a new query starts from the savepoint (new checkpoint, new state storage) and runs one batch of the
   workload's first change file, whose keys touch every key group: every key group loads its savepoint row, restores
   its RocksDB base and writes it as the new query's first base (``triggerExecution`` of that batch).

The acceptance target: restore <= 2 x fill. Each run is its own process (``python bench/savepoint_workload.py
--size ...``): a fresh JVM and Python workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import large_state_workload as L  # noqa: E402
import spark_workloads as W  # noqa: E402
from run_sampling import files_under  # noqa: E402


def _query(spark, inbox: Path, checkpoint: Path, storage: Path, local: Path, name: str, **extra):
    from keyedstate.spark import keyed_process

    source = (spark.readStream.schema(L.INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(inbox))
              .withWatermark("ts", "0 seconds"))
    output = keyed_process(source, ["key"], L.LatestWithTimer(), L.OUTPUT_SCHEMA, event_time_column="ts",
                           state_backend="rocksdb", state_storage=str(storage), state_local_dir=str(local), **extra)
    return (output.writeStream.format("memory").queryName(name).outputMode("append")
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="100 milliseconds").start())


def _feed(path: Path, inbox: Path) -> None:
    inbox.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, inbox / path.name)
    except OSError:
        import shutil

        shutil.copyfile(path, inbox.parent / path.name)
        os.replace(inbox.parent / path.name, inbox / path.name)


def run(size: L.Size, scratch: Path) -> dict:
    from pyspark import cloudpickle

    from keyedstate.spark import write_savepoint

    cloudpickle.register_pickle_by_value(L)
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    spark = W.spark_session(scratch / "warehouse")
    files = L.ensure_input(size, 1)

    _feed(files[0], scratch / "in-1")
    query = _query(spark, scratch / "in-1", scratch / "chk-1", scratch / "storage-1", scratch / "local", "fill")
    fill = L._await_batch(query, 0)["durationMs"]["triggerExecution"] / 1000
    query.stop()
    print(f"[savepoint] {size.name}: filled {size.keys:,} keys in {fill:.1f} s", flush=True)

    started = time.perf_counter()
    savepoint = write_savepoint(spark, str(scratch / "chk-1"), str(scratch / "savepoint"),
                                state_storage=str(scratch / "storage-1"), state_local_dir=str(scratch / "local"))
    write = time.perf_counter() - started
    on_disk = sum(s for _, s in files_under(scratch / "savepoint").values())
    if (savepoint.records, savepoint.timers) != (size.keys, size.keys):
        raise AssertionError(f"the savepoint holds {savepoint.records} records and {savepoint.timers} timers, not "
                             f"{size.keys} of each")
    print(f"[savepoint] {size.name}: wrote the savepoint in {write:.1f} s ({on_disk / 1e6:.1f} MB)", flush=True)

    _feed(files[1], scratch / "in-2")
    query = _query(spark, scratch / "in-2", scratch / "chk-2", scratch / "storage-2", scratch / "local", "restore",
                   initial_state=savepoint)
    restore = L._await_batch(query, 0)["durationMs"]["triggerExecution"] / 1000
    query.stop()
    fired = spark.table("restore").count()
    spark.stop()
    if fired:
        raise AssertionError(f"{fired} timers fired after the restore; they must stay pending")
    print(f"[savepoint] {size.name}: restored in {restore:.1f} s ({restore / fill:.2f} x the fill; target <= 2)",
          flush=True)
    return {"workload": "savepoint", "variant": "rocksdb", "size": size.name, "keys": size.keys, "fill_s": fill,
            "write_s": round(write, 3), "restore_s": restore, "restore_to_fill": round(restore / fill, 3),
            "savepoint_bytes": on_disk, "row_file_bytes": savepoint.size_bytes,
            "key_groups": savepoint.key_groups_with_state}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="one savepoint run (see the module docstring)")
    parser.add_argument("--size", choices=sorted(L.SIZES), required=True)
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    options = parser.parse_args(argv)
    options.result.write_text(json.dumps(run(L.SIZES[options.size], options.scratch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
