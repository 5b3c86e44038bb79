"""A long RocksDB-mode run with its state on a real S3-compatible server: 300 micro-batches with steady churn keep
durable storage and local disk bounded, garbage collection never deletes a file a version Spark still retains
(``minBatchesToRetain``) names: the state of every retained batch restores from storage.

About 5 minutes on a lightly loaded 2-core machine (a batch is ~1 s: mostly Spark's own job per batch and its two
Python passes; RocksDB mode on S3 adds ~0.2-0.3 s): ``make test`` runs it beside the suite, ``make test-long`` alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from keyedstate.spark import read_keyed_state
from tests.spark.file_stream import start_query, write_input
from tests.spark.rocksdb_runs import OUTPUT, SCHEMA, SMALL_POLICY, CountListAndQuiet, batch_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(3600)]

FILES = int(os.environ.get("KEYEDSTATE_LONG_RUN_BATCHES", "300"))  # a smaller number checks the test itself quickly
CHUNK = 25
RETAIN = 10


def tree_size(directory: Path) -> tuple[int, int]:
    """Files and bytes under ``directory``. A worker may delete a database it no longer keeps while this walks (an
    empty key group's, when its holder closes it): a file gone before its size is read is not counted."""
    sizes = []
    for path in directory.rglob("*") if directory.exists() else ():
        try:
            if path.is_file():
                sizes.append(path.stat().st_size)
        except FileNotFoundError:
            pass
    return len(sizes), sum(sizes)


def test_300_batches_stay_bounded_and_every_retained_batch_restores(spark, tmp_path, s3):
    storage_root = s3.data_dir / s3.bucket
    backend = {"state_backend": "rocksdb", "state_storage": f"s3://{s3.bucket}/long",
               "state_storage_options": s3.storage_options(), "state_local_dir": str(tmp_path / "local"),
               "snapshot_policy": SMALL_POLICY}
    (tmp_path / "in").mkdir()
    spark.conf.set("spark.sql.streaming.minBatchesToRetain", str(RETAIN))
    curve = []
    try:
        query = start_query(spark, tmp_path, CountListAndQuiet(), schema=SCHEMA, key_columns=["user"],
                            output_schema=OUTPUT, sink_path=tmp_path / "out", **backend)
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
        final_state = read_keyed_state(spark, str(checkpoint), state_storage_options=s3.storage_options())
        assert final_state
        # A restart from any retained batch first restores every key group's version of that batch from storage:
        # every file those versions name must still be there (and verify against its checksum).
        for batch in range(last - RETAIN + 1, last + 1):
            assert read_keyed_state(spark, str(checkpoint), batch_id=batch,
                                    state_storage_options=s3.storage_options()), batch
    finally:
        spark.conf.unset("spark.sql.streaming.minBatchesToRetain")
