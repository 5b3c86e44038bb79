"""RocksDB mode's state storage on file systems that refuse writes (real tmpfs mounts): a read-only storage is
refused when keyed_process is called, and a full one fails the batch saying "no space left on device" and what to do,
instead of an errno."""

from __future__ import annotations

import pytest

from keyedstate.errors import ConfigurationError
from keyedstate.spark import keyed_process
from tests.mounts import tmpfs
from tests.spark.test_bad_input import SCHEMA, Count, run_until_failure

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_read_only_state_storage_is_refused_by_keyed_process_before_the_query_starts(spark, tmp_path):
    frame = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    with tmpfs(tmp_path / "read-only", read_only=True) as storage:
        with pytest.raises(ConfigurationError) as failure:
            keyed_process(frame, ["user"], Count(), "user STRING, count BIGINT", time_mode="processing_time",
                          state_backend="rocksdb", state_storage=str(storage),
                          state_local_dir=str(tmp_path / "local"))
    message = str(failure.value)
    assert f"state_storage {str(storage)!r} is not usable" in message
    assert "Read-only file system" in message and "mount it read-write" in message


def test_a_full_state_storage_fails_the_batch_with_no_space_left_and_the_fix(spark, tmp_path):
    rows = [{"user": f"user-{i}", "payload": "x" * 200, "ts": "2024-01-01T00:00:00Z"} for i in range(2000)]
    with tmpfs(tmp_path / "full", size="16k") as storage:
        message = run_until_failure(spark, tmp_path, Count(), rows, "full_storage", state_backend="rocksdb",
                                    state_storage=str(storage), state_local_dir=str(tmp_path / "local"))
    assert "NoSpaceLeftError" in message
    assert f"no space left on device at {storage}/" in message
    assert "free space there, or move state_storage" in message
