"""Executor loss on a real cluster: ``local-cluster[2,1,1024]`` (standalone master and workers, each executor its own
JVM with its own local directory), RocksDB mode with its state on a real S3-compatible server. One executor JVM is
SIGKILLed while a task of the batch is inside ``process_element``; Spark reruns the task on the other (or a new)
executor, which has no local database for those key groups and rebuilds them from S3. Output and state equal a run
that was never interrupted.

Starting a local cluster takes about a minute on a busy 2-core machine; the whole test about a minute idle, so it runs
with the rest of the suite (not marked long)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.spark.exactly_once_job import run_job
from tests.spark.file_stream import wait_until
from tests.spark.test_exactly_once import results, start_job, write_all_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_sigkill_of_an_executor_mid_batch_restores_its_key_groups_elsewhere_from_s3(spark, tmp_path, s3, monkeypatch):
    from tests.spark.conftest import ROCKSDB_PROVIDER

    options = s3.storage_options()
    # the standard AWS environment: the driver, both executors and the test's reader get it
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["secret_key"])
    monkeypatch.setenv("AWS_REGION", options["region"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    write_all_input(tmp_path)
    job = start_job(tmp_path, ROCKSDB_PROVIDER, "rocksdb", SPARK_MASTER="local-cluster[2,1,1024]",
                    STATE_STORAGE=f"s3://{s3.bucket}/cluster-state", PAUSE_BATCH="3", PAUSE_AT="element")
    try:
        # The uninterrupted run, in this process while the cluster's JVMs start (which is mostly waiting).
        uninterrupted = tmp_path / "uninterrupted"
        write_all_input(uninterrupted)
        run_job(spark, str(uninterrupted), {"state_backend": "heap"})
        marker = tmp_path / "paused"
        wait_until(lambda: marker.exists() and len(marker.read_text().split()) == 2, 420,
                   "a task of batch 3 to pause inside process_element")
        executor = int(marker.read_text().split()[1])
        assert executor > 0
        os.kill(executor, signal.SIGKILL)
        assert job.wait(timeout=600) == 0, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    with pytest.raises(ProcessLookupError):
        os.kill(executor, 0)  # that JVM really died
    assert list((s3.data_dir / s3.bucket / "cluster-state").rglob("c*.log"))  # the state went to S3
    assert results(spark, tmp_path) == results(spark, uninterrupted)
    assert not (tmp_path / "local-rocksdb").exists()  # each executor used its own local directory
