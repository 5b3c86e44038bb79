"""A long RocksDB-mode run with its state on a real S3-compatible server: 300 micro-batches with steady churn keep
durable storage and local disk bounded, garbage collection never deletes a file a version Spark still retains
(``minBatchesToRetain``) names: the state of every retained batch restores from storage.

About 5 minutes on a lightly loaded 2-core machine (a batch is ~1 s: mostly Spark's own job per batch and its two
Python passes; RocksDB mode on S3 adds ~0.2 s): ``make test-long`` runs this."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

from pyspark.sql import DataFrame
from pyspark.sql.functions import lit

from keyedstate.spark import read_keyed_state
from keyedstate.spark.compat import state_rows_frame
from keyedstate.spark.row_format import StateRow
from keyedstate.spark.state_reader import decode_state_row
from tests.spark.file_stream import start_query, write_input
from tests.spark.rocksdb_runs import OUTPUT, SCHEMA, SMALL_POLICY, CountListAndQuiet, batch_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(3600)]

FILES = int(os.environ.get("KEYEDSTATE_LONG_RUN_BATCHES", "300"))  # a smaller number checks the test itself quickly
CHUNK = 25
RETAIN = 10


def tree_size(directory: Path) -> tuple[int, int]:
    files = [p for p in directory.rglob("*") if p.is_file()] if directory.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


def test_300_batches_stay_bounded_and_every_retained_batch_restores(spark, tmp_path, s3):
    storage_root = s3.data_dir / s3.bucket
    backend = {"state_backend": "rocksdb", "state_storage": f"s3://{s3.bucket}/long",
               "state_storage_options": s3.storage_options(), "state_local_dir": str(tmp_path / "local"),
               "snapshot_policy": SMALL_POLICY}
    (tmp_path / "in").mkdir()
    spark.conf.set("spark.sql.streaming.minBatchesToRetain", str(RETAIN))
    curve = []
    try:
        # The output goes to the memory sink: nothing here reads it, and a file sink's writes and log add a good
        # part of a small batch's time.
        query = start_query(spark, tmp_path, CountListAndQuiet(), schema=SCHEMA, key_columns=["user"],
                            output_schema=OUTPUT, query_name="long_run", **backend)
        try:
            for first in range(0, FILES, CHUNK):
                for index in range(first, first + CHUNK):
                    write_input(tmp_path / "in", index, batch_rows(index))
                query.processAllAvailable()
                curve.append((first + CHUNK, *tree_size(storage_root), *tree_size(tmp_path / "local")))
        finally:
            query.stop()
        print("\nbatches, storage files, storage bytes, local files, local bytes:\n" + json.dumps(curve))
        # bounded: after the first 100 batches, neither storage nor local disk keeps growing
        settled = [row for row in curve if row[0] >= min(100, FILES // 2)]
        assert max(row[1] for row in settled) <= 1.5 * settled[0][1] + 20, curve
        assert max(row[2] for row in settled) <= 1.5 * settled[0][2] + 20_000, curve
        assert max(row[4] for row in settled) <= 2 * settled[0][4] + 1_000_000, curve

        checkpoint = tmp_path / "checkpoint"
        last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        assert read_keyed_state(spark, str(checkpoint), state_storage_options=s3.storage_options())
        # A restart from any retained batch first restores every key group's version of that batch from storage:
        # every file those versions name must still be there (and verify against its checksum). The rows of all
        # retained batches come in one Spark job, and a version several batches share is restored once.
        retained = range(last - RETAIN + 1, last + 1)
        frames = [state_rows_frame(spark, str(checkpoint), 0, batch, "test").withColumn("batch", lit(batch))
                  for batch in retained]
        rows = [row for row in functools.reduce(DataFrame.unionByName, frames).collect() if row["state"]]
        assert {row["batch"] for row in rows} == set(retained)
        for state in {bytes(row["state"]): row for row in rows}.values():
            assert decode_state_row(StateRow.from_row(state), state_storage_options=s3.storage_options())
    finally:
        spark.conf.unset("spark.sql.streaming.minBatchesToRetain")
