"""RocksDB mode with its state on a real S3-compatible server (S3Proxy on 127.0.0.1): output and state equal row
mode's with every batch restoring from S3 and a 20 s outage mid-query ridden out within the retry budget; a longer
outage fails the batch naming the storage and the option, after which the restarted query continues exactly once;
the endpoint given in the URI's query string serves every batch and the restart."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from keyedstate.spark import read_keyed_state
from tests.spark.rocksdb_runs import BATCHES, SMALL_POLICY, output_of, run_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def s3_backend(s3, base: Path, **storage_options) -> dict:
    return {"state_backend": "rocksdb", "state_storage": f"s3://{s3.bucket}/jobs/state",
            "state_storage_options": s3.storage_options(**storage_options), "state_local_dir": str(base / "local"),
            "snapshot_policy": SMALL_POLICY}


def objects(s3, pattern: str) -> list[Path]:
    return sorted((s3.data_dir / s3.bucket).rglob(pattern))


def test_state_on_s3_survives_a_20_second_outage_mid_query_with_nothing_lost(spark, tmp_path, s3, heap_run):
    done = []
    restart: list[threading.Thread] = []

    def lose_local_databases_and_s3_after_the_third_batch():
        # every batch restores from S3 (bases downloaded, changelogs replayed), as on a new executor
        shutil.rmtree(tmp_path / "local", ignore_errors=True)
        done.append(1)
        if len(done) == 3:
            s3.kill()
            restart.append(threading.Thread(target=lambda: (time.sleep(20), s3.start())))
            restart[0].start()

    started = time.monotonic()
    run_batches(spark, tmp_path, range(BATCHES), between=lose_local_databases_and_s3_after_the_third_batch,
                **s3_backend(s3, tmp_path))
    restart[0].join()
    assert time.monotonic() - started >= 20  # the fourth batch waited for S3
    assert output_of(spark, tmp_path) == heap_run[0]
    state = read_keyed_state(spark, str(tmp_path / "checkpoint"), state_storage_options=s3.storage_options())
    assert state == heap_run[1]
    assert objects(s3, "b*.json") and objects(s3, "c*.log") and objects(s3, "*.sst")
    assert not (tmp_path / "state-storage").exists()


def test_an_outage_longer_than_the_budget_fails_naming_storage_and_option_then_resumes_exactly_once(
        spark, tmp_path, s3, heap_run):
    backend = s3_backend(s3, tmp_path, retry_seconds=3)
    done = []

    def outage_after_third_batch():
        done.append(1)
        if len(done) == 3:
            s3.kill()

    with pytest.raises(StreamingQueryException) as failure:
        run_batches(spark, tmp_path, range(4), between=outage_after_third_batch, **backend)
    assert len(done) == 3  # the fourth batch failed
    message = str(failure.value)
    assert f"s3://{s3.bucket}/jobs/state/" in message
    assert "retrying for 3 s" in message and "state_storage_options['retry_seconds']" in message
    s3.start()
    run_batches(spark, tmp_path, range(4, BATCHES), **backend)  # batch 3 runs again first
    assert output_of(spark, tmp_path) == heap_run[0]
    assert read_keyed_state(spark, str(tmp_path / "checkpoint"), state_storage_options=s3.storage_options()) == \
        heap_run[1]


def test_the_endpoint_in_the_uris_query_string_serves_every_batch_and_the_restart(spark, tmp_path, s3, heap_run):
    # the documented form: the per-query directories must go into the path, not after "scheme=http"
    credentials = {name: value for name, value in s3.storage_options().items() if name != "endpoint_url"}
    backend = {"state_backend": "rocksdb", "state_local_dir": str(tmp_path / "local"), "snapshot_policy": SMALL_POLICY,
               "state_storage": f"s3://{s3.bucket}/jobs/state?endpoint_override=127.0.0.1:{s3.port}&scheme=http",
               "state_storage_options": credentials}
    half = BATCHES // 2
    run_batches(spark, tmp_path, range(half), **backend)
    shutil.rmtree(tmp_path / "local")  # the restarted query restores every key group through the URI
    run_batches(spark, tmp_path, range(half, BATCHES), **backend)
    assert output_of(spark, tmp_path) == heap_run[0]
    assert read_keyed_state(spark, str(tmp_path / "checkpoint"), state_storage_options=credentials) == heap_run[1]
    [query_dir] = (s3.data_dir / s3.bucket / "jobs" / "state").iterdir()
    assert [uid.name for uid in query_dir.iterdir()] == ["CountListAndQuiet"]
    assert objects(s3, "b*.json") and objects(s3, "c*.log")
