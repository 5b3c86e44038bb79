"""RocksDB mode never lets two runs of a query share one state directory, nor reads one state directory and writes
another: each case fails with StateStorageConflictError naming the directories and the fix."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from keyedstate.checkpoint import CheckpointStorage
from keyedstate.errors import StateStorageConflictError
from keyedstate.spark.storage_claims import WRITERS_DIR, check_single_writer
from tests.short_lived_jvms import short_lived_jvm_environment
from tests.spark.file_stream import start_query, wait_until, write_input
from tests.spark.rocksdb_runs import OUTPUT, SCHEMA, SMALL_POLICY, CountListAndQuiet, batch_rows, run_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]

COPY_JOB = Path(__file__).with_name("copied_checkpoint_job.py")


def rocksdb(base: Path, **overrides) -> dict:
    return {"state_backend": "rocksdb", "state_storage": str(base / "state-storage"),
            "state_local_dir": str(base / "local"), "snapshot_policy": SMALL_POLICY, **overrides}


def test_a_restart_with_another_uid_fails_instead_of_starting_from_empty_state(spark, tmp_path):
    run_batches(spark, tmp_path, range(2), **rocksdb(tmp_path))
    with pytest.raises(StreamingQueryException) as failure:
        run_batches(spark, tmp_path, range(2, 3), **rocksdb(tmp_path, uid="Renamed"))
    message = str(failure.value)  # refused by the restart record, before any key group loads
    assert "RestartSettingsChangedError" in message
    assert "written with uid='CountListAndQuiet', but it now runs with uid='Renamed'" in message
    assert "Keep uid='CountListAndQuiet'" in message


def test_a_restart_with_another_state_storage_fails_naming_both(spark, tmp_path):
    run_batches(spark, tmp_path, range(2), **rocksdb(tmp_path))
    shutil.rmtree(tmp_path / "local")
    with pytest.raises(StreamingQueryException) as failure:
        run_batches(spark, tmp_path, range(2, 3), **rocksdb(tmp_path, state_storage=str(tmp_path / "elsewhere")))
    message = str(failure.value)
    assert str(tmp_path / "state-storage") in message and str(tmp_path / "elsewhere") in message
    assert "a different state_storage" in message


def test_a_run_that_another_run_of_the_same_query_overtook_fails(tmp_path):
    """What a copy of a checkpoint, started with the original's state_storage while the original runs, looks like
    to the storage: a second run id registering later."""
    storage = CheckpointStorage(tmp_path / "query-id" / "uid")
    check_single_writer(storage, "run-original", 5)
    time.sleep(1.1)  # object stores keep modification times in seconds
    check_single_writer(storage, "run-copy", 5)  # the later run goes on
    check_single_writer(storage, "run-original", 5)  # checked once per batch
    with pytest.raises(StateStorageConflictError, match="another run of this query \\(run run-copy\\) started "
                                                        "writing to .* while this run \\(run run-original\\)"):
        check_single_writer(storage, "run-original", 6)
    assert sorted(name for name, _, _ in storage.list_entries(WRITERS_DIR)) == ["run-copy.json", "run-original.json"]


@pytest.mark.driver_process
def test_a_copied_checkpoint_started_next_to_its_running_original_stops_the_original(spark, tmp_path):
    """Two Spark applications: the original query keeps running in this one; a copy of its checkpoint, given the
    same state_storage, starts in another and runs a batch. The original's next batch fails instead of deleting the
    copy's files or reading them."""
    original, copy, storage = tmp_path / "original", tmp_path / "copy", tmp_path / "state-storage"
    backend = rocksdb(original, state_storage=str(storage))
    # The copy's application starts now and waits for the go file: its start-up overlaps the original's batches.
    log = tmp_path / "copy-job.log"
    with open(log, "wb") as output:
        copy_job = subprocess.Popen([sys.executable, str(COPY_JOB), str(copy), str(storage), "2",
                                     str(tmp_path / "go")], stdout=output, stderr=subprocess.STDOUT,
                                    env=short_lived_jvm_environment(), start_new_session=True)
    try:
        run_batches(spark, original, range(2), **backend)
        shutil.copytree(original / "checkpoint", copy / "checkpoint")
        shutil.copytree(original / "in", copy / "in")
        query = start_query(spark, original, CountListAndQuiet(), schema=SCHEMA, key_columns=["user"],
                            output_schema=OUTPUT, sink_path=original / "out", **backend)
        try:
            write_input(original / "in", 2, batch_rows(2))
            query.processAllAvailable()  # the original's run is registered
            time.sleep(1.1)  # registrations are ordered by modification time (seconds on object stores)
            committed = len(list((copy / "checkpoint" / "commits").glob("[0-9]*")))
            (tmp_path / "go").touch()
            # the copy's batch committed (its application may still be shutting down meanwhile)
            wait_until(lambda: copy_job.poll() is not None
                       or len(list((copy / "checkpoint" / "commits").glob("[0-9]*"))) > committed, 600,
                       "the copy's batch to commit")
            assert copy_job.poll() in (None, 0), log.read_text()[-3000:]
            write_input(original / "in", 3, batch_rows(3))
            with pytest.raises(StreamingQueryException) as failure:
                query.processAllAvailable()
        finally:
            query.stop()
    finally:
        try:
            if (tmp_path / "go").exists():
                copy_job.wait(timeout=120)
        finally:
            if copy_job.poll() is None:
                os.killpg(copy_job.pid, signal.SIGKILL)  # the job and its JVM
                copy_job.wait()
    message = str(failure.value)
    assert "StateStorageConflictError" in message and "another run of this query" in message
    assert str(storage) in message and "a copied checkpoint needs its own state_storage" in message


def test_a_location_a_checkpoint_saved_with_credentials_is_shown_redacted_when_it_conflicts():
    # checkpoints written before URIs with credentials were refused saved them in every version record
    from keyedstate.spark.rocksdb_mode import _moved_message
    from keyedstate.state.rocksdb.versions import VersionRecord

    record = VersionRecord("t", None, None, 0, location="s3://AKIA:hunter2@bucket/old/q/CountListAndQuiet")
    message = _moved_message(3, record, "s3://bucket/new/q/CountListAndQuiet", "CountListAndQuiet")
    assert "hunter2" not in message
    assert "s3://*********(redacted)@bucket/old/q/CountListAndQuiet" in message
    assert "a different state_storage" in message
