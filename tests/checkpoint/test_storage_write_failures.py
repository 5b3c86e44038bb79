"""State storage that cannot take writes: a read-only storage is refused by the driver's probe (not by batch 0), and
a full disk is reported as "no space left on device at <where>" with the fix, on real tmpfs mounts and S3Proxy."""

from __future__ import annotations

import os

import pytest

from keyedstate.checkpoint import CheckpointStorage
from keyedstate.checkpoint.storage import PROBE_PREFIX
from keyedstate.errors import ConfigurationError, NoSpaceLeftError, SnapshotCorruptedError
from tests.mounts import tmpfs


class Where:
    def describe(self) -> str:
        return "a test file"


def test_a_read_only_storage_fails_the_probe_naming_the_location_and_the_fix(tmp_path):
    with tmpfs(tmp_path / "ro", read_only=True) as mount:
        storage = CheckpointStorage(str(mount))  # the root exists: only a write tells
        with pytest.raises(ConfigurationError) as failure:
            storage.check_writable()
    message = str(failure.value)
    assert f"state storage {mount} is not writable" in message
    assert "Read-only file system" in message and "mount it read-write" in message
    assert "pass another state_storage" in message


def test_the_probe_leaves_nothing_behind_and_never_collides(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "storage"))
    storage.check_writable()
    storage.check_writable()
    assert storage.list_files() == []


def test_a_full_storage_says_no_space_left_where_and_what_to_do(tmp_path):
    big = tmp_path / "big.sst"
    big.write_bytes(os.urandom(200_000))
    with tmpfs(tmp_path / "full", size="64k") as mount:
        storage = CheckpointStorage(str(mount / "state"))
        with pytest.raises(NoSpaceLeftError) as written:
            storage.write_bytes("kg-00001/c1.log", os.urandom(200_000), "c1.log")
        with pytest.raises(NoSpaceLeftError) as uploaded:
            storage.upload_file(str(big), "kg-00001/sst/a.sst", "a.sst")
    for failure, what in ((written, "write kg-00001/c1.log"), (uploaded, "upload")):
        message = str(failure.value)
        assert f"cannot {what}" in message
        assert f"no space left on device at {mount / 'state'}" in message
        assert "free space there, or move state_storage" in message


def test_a_download_into_a_full_local_disk_is_no_space_not_a_corrupt_snapshot(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "state"))
    entry = storage.write_bytes("kg-00001/sst/a.sst", os.urandom(200_000), "a.sst")
    with tmpfs(tmp_path / "local", size="64k") as local:
        with pytest.raises(NoSpaceLeftError) as failure:
            storage.download_verified(entry, Where(), str(local / "a.sst"))
    assert not isinstance(failure.value, SnapshotCorruptedError)
    message = str(failure.value)
    assert f"no space left on device at {local}" in message and "move state_local_dir" in message


@pytest.mark.slow
def test_the_probe_on_s3_leaves_no_object_behind(s3):
    storage = CheckpointStorage(f"s3://{s3.bucket}/jobs/state", options=s3.storage_options())
    storage.check_writable()
    assert storage.list_files() == []
    assert not [p for p in (s3.data_dir / s3.bucket).rglob("*") if p.name.startswith(PROBE_PREFIX)]
