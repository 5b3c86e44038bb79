"""Restarting a RocksDB-mode query from an older batch than its last one, the way a user rewinds a checkpoint
(docs/operations.md, "Restarting from an older batch"): with its state on a real S3-compatible server and
``minBatchesToRetain`` small, the oldest batch Spark still lets a query restart from replays to the output and state
of a run that never went past it; a checkpoint put back to a batch that is no longer retained (from a backup) fails
naming the fix instead of reading state that garbage collection deleted."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from keyedstate.spark import read_keyed_state
from keyedstate.state.rocksdb.versions import SnapshotPolicy
from tests.spark.conftest import ROCKSDB_PROVIDER
from tests.spark.file_stream import start_query, write_input
from tests.spark.rocksdb_runs import OUTPUT, SCHEMA, CountListAndQuiet, batch_rows, output_of

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FILES = 12
RETAIN = 5
# Two key groups, each written in nearly every batch, and a new base every other write: garbage collection deletes
# files within the first dozen batches, so the oldest retained batch sits right at what it keeps.
KEY_GROUPS = 2
POLICY = SnapshotPolicy(max_changelogs=1, min_changelog_bytes=1)
_NUMBERED = re.compile(r"^\.?(\d+)")  # 12, 12.compact, 13.delta, .12.crc, 14.zip, 14_<id>.zip, 15.changelog


def run(spark, base: Path, files: range, **backend) -> None:
    """Run the query on ``base`` until it has processed every input file so far, after writing ``files``."""
    (base / "in").mkdir(parents=True, exist_ok=True)
    query = start_query(spark, base, CountListAndQuiet(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
                        sink_path=base / "out", num_key_groups=KEY_GROUPS, snapshot_policy=POLICY, **backend)
    try:
        for index in files:
            write_input(base / "in", index, batch_rows(index))
        query.processAllAvailable()
    finally:
        query.stop()


def batch_ids(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def source_offset(checkpoint: Path, batch: int) -> int:
    """The file source's own log offset as of ``batch`` (no-data batches repeat it, so it is not the batch id)."""
    return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[2])["logOffset"]


def rewind(checkpoint: Path, batch: int, sink: Path) -> None:
    """What docs/operations.md tells a user to delete to restart after ``batch``: every offsets/ and commits/ entry
    after it, the file source's log entries after its offset, the state files of versions after ``batch + 1`` (the
    version ``batch`` committed), and the file sink's log entries after it (else the sink skips the replayed
    batches as already written)."""
    later = [(checkpoint / "offsets", batch), (checkpoint / "commits", batch), (sink / "_spark_metadata", batch),
             (checkpoint / "sources" / "0", source_offset(checkpoint, batch))]
    later += [(partition, batch + 1) for partition in (checkpoint / "state" / "0").iterdir()
              if partition.name.isdigit()]
    for directory, last in later:
        for path in directory.iterdir():
            number = _NUMBERED.match(path.name)
            if path.is_file() and number is not None and int(number.group(1)) > last:
                path.unlink()


def stored_batches(root: Path) -> set[int]:
    """The batches whose state files are in RocksDB mode's storage below ``root``."""
    names = (p.name for p in root.rglob("*") if p.is_file() and p.parent.name.startswith("kg-"))
    return {int(m.group(1)) for m in map(re.compile(r"^[bc](\d+)-").match, names) if m is not None}


@pytest.fixture
def retained(spark):
    spark.conf.set("spark.sql.streaming.minBatchesToRetain", str(RETAIN))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    yield
    for key in ("spark.sql.streaming.minBatchesToRetain", "spark.sql.streaming.stateStore.providerClass",
                "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"):
        spark.conf.unset(key)


def test_a_restart_from_the_oldest_retained_batch_replays_it_and_one_past_them_fails(spark, tmp_path, s3, retained):
    rewound, reference = tmp_path / "rewound", tmp_path / "reference"
    on_s3 = {"state_backend": "rocksdb", "state_storage": f"s3://{s3.bucket}/rewind",
             "state_storage_options": s3.storage_options(), "state_local_dir": str(tmp_path / "local")}
    run(spark, rewound, range(2), **on_s3)
    for name in ("checkpoint", "out"):  # a backup of the checkpoint and the output, but not of the state storage
        shutil.copytree(rewound / name, tmp_path / "backup" / name)
    run(spark, rewound, range(2, FILES), **on_s3)
    checkpoint = rewound / "checkpoint"
    last, offsets = batch_ids(checkpoint / "commits")[-1], batch_ids(checkpoint / "offsets")
    # Spark restarts after batch K only with offsets K and K - 1 in its log, and keeps the last RETAIN + 1
    oldest = offsets[0] + 1
    assert oldest == last - RETAIN + 1 and last - oldest >= 3, (offsets, last)
    files_until_oldest = source_offset(checkpoint, oldest) + 1

    # 1. Restart after the oldest retained batch: the batches after it run again from its state.
    rewind(checkpoint, oldest, rewound / "out")
    output_at_oldest = output_of(spark, rewound)
    run(spark, rewound, range(0), **on_s3)  # the input files after the rewound batch are there already
    assert batch_ids(checkpoint / "commits")[-1] >= last  # the batches after it ran again
    output = output_of(spark, rewound)
    assert len(output) > len(output_at_oldest)  # and wrote output: the sink did not skip them
    local = {"state_backend": "rocksdb", "state_storage": str(reference / "state-storage"),
             "state_local_dir": str(tmp_path / "local-reference")}
    run(spark, reference, range(files_until_oldest), **local)
    run(spark, reference, range(files_until_oldest, FILES), **local)
    assert output == output_of(spark, reference)
    state = read_keyed_state(spark, str(checkpoint), state_storage_options=s3.storage_options())
    assert state and state == read_keyed_state(spark, str(reference / "checkpoint"))

    # 2. The backup taken after batch 2 is past the retained batches: what its state rows name is gone.
    assert min(stored_batches(s3.data_dir / s3.bucket / "rewind")) > 2
    for name in ("checkpoint", "out"):
        shutil.rmtree(rewound / name)
        shutil.copytree(tmp_path / "backup" / name, rewound / name)
    with pytest.raises(StreamingQueryException) as failure:
        run(spark, rewound, range(0), **on_s3)
    message = str(failure.value)
    assert "StateVersionNotRetainedError" in message and "is no longer retained" in message
    assert f"last minBatchesToRetain ({RETAIN}) batches" in message and f"s3://{s3.bucket}/rewind" in message
    assert "restore the state storage from the same backup as the checkpoint" in message
