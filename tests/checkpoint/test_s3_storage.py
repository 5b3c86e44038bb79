"""Checkpoint storage on a real S3-compatible server (S3Proxy on 127.0.0.1): credentials and endpoint from options or
the standard AWS environment, RocksDB-mode versions (harness snapshots, base collection) through it, and outages
ridden out within the retry budget or reported naming the location and the option to raise."""

from __future__ import annotations

import threading
import time

import pytest

from keyedstate import ValueStateDescriptor
from keyedstate.checkpoint import CheckpointStorage
from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.manifest import FileEntry, SnapshotManifest
from keyedstate.errors import ConfigurationError, SnapshotCorruptedError, StorageUnavailableError
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend
from keyedstate.state.rocksdb.versions import KeyGroupVersions, VersionRecord
from keyedstate.testing.snapshots import HarnessRocksDBStore
from timers import InternalTimerService

pytestmark = pytest.mark.slow


class Where:
    def describe(self) -> str:
        return "a test file"


def test_storage_options_reach_the_server_and_files_round_trip(s3, tmp_path):
    storage = CheckpointStorage(f"s3://{s3.bucket}/job/state", options=s3.storage_options())
    entry = storage.write_bytes("kg-00001/c1.log", b"changes", "c1.log")
    local = tmp_path / "big.sst"
    local.write_bytes(bytes(range(256)) * 40_000)  # 10 MB: more than one chunk
    uploaded = storage.upload_file(str(local), "kg-00001/sst/big.sst", "big.sst", shared=True)
    assert storage.read_verified(entry, Where()) == b"changes"
    storage.download_verified(uploaded, Where(), str(tmp_path / "back.sst"))
    assert (tmp_path / "back.sst").read_bytes() == local.read_bytes()
    assert storage.list_files() == ["kg-00001/c1.log", "kg-00001/sst/big.sst"]
    assert {name for name, _, _ in storage.list_entries("kg-00001")} == {"c1.log", "sst"}
    assert all(mtime is not None for _, is_dir, mtime in storage.list_entries("kg-00001/sst") if not is_dir)
    storage.delete_tree("kg-00001")
    assert storage.list_files() == []
    assert sorted(p.name for p in (s3.data_dir / s3.bucket / "job" / "state").rglob("*") if p.is_file()) == []


def test_credentials_and_endpoint_come_from_the_standard_aws_environment(s3, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.storage_options()["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.storage_options()["secret_key"])
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    storage = CheckpointStorage(f"s3://{s3.bucket}/from-env")
    storage.write_bytes("a/b.txt", b"x", "b.txt")
    assert (s3.data_dir / s3.bucket / "from-env" / "a" / "b.txt").read_bytes() == b"x"


def test_wrong_credentials_fail_naming_the_location(s3):
    with pytest.raises(Exception) as failure:
        CheckpointStorage(f"s3://{s3.bucket}/x", options=s3.storage_options(secret_key="wrong", retry_seconds=0))
    assert f"s3://{s3.bucket}/x" in str(failure.value)


def test_unknown_or_malformed_options_are_refused():
    with pytest.raises(ConfigurationError, match="unknown state_storage_options \\['endpoint'\\]"):
        CheckpointStorage("s3://bucket/x", options={"endpoint": "http://localhost:9000"})
    with pytest.raises(ConfigurationError, match="retry_seconds'\\] must be a number >= 0"):
        CheckpointStorage("s3://bucket/x", options={"retry_seconds": "long"})
    with pytest.raises(ConfigurationError, match="endpoint_url'\\] must look like http://host:port"):
        CheckpointStorage("s3://bucket/x", options={"endpoint_url": "ftp://localhost"})


def test_a_harness_rocksdb_snapshot_goes_to_s3_and_restores_from_it(s3, tmp_path):
    location = f"s3://{s3.bucket}/harness"
    backend = RocksDBKeyedStateBackend(str(tmp_path / "db1"), num_key_groups=8, record_changes=True)
    store = HarnessRocksDBStore(backend, CheckpointStorage(location, options=s3.storage_options()))
    count = backend.get_or_create_state(ValueStateDescriptor("count", int))
    for key in range(200):
        backend.set_current_key(f"k{key}")
        count.update(key)
    rows = store.snapshot(1, InternalTimerService(backend))
    store.close()
    backend.close()
    assert rows and all(VersionRecord.from_bytes(row[2]).location == location for row in rows.values())
    restored = RocksDBKeyedStateBackend(str(tmp_path / "db2"), num_key_groups=8, record_changes=True)
    loader = HarnessRocksDBStore(restored, CheckpointStorage(location, options=s3.storage_options()))
    loader.restore(rows, InternalTimerService(restored))
    loader.close()
    count = restored.get_or_create_state(ValueStateDescriptor("count", int))
    restored.set_current_key("k123")
    assert count.value() == 123
    restored.close()


def restart_after(server, seconds: float) -> threading.Thread:
    def restart():
        time.sleep(seconds)
        server.start()

    thread = threading.Thread(target=restart)
    thread.start()
    return thread


def test_an_outage_shorter_than_the_retry_budget_only_delays_writes_and_reads(s3, caplog):
    storage = CheckpointStorage(f"s3://{s3.bucket}/outage", options=s3.storage_options(retry_seconds=30))
    entry = storage.write_bytes("kg-00000/before.log", b"before", "before.log")
    s3.kill()
    restarting = restart_after(s3, 4)
    started = time.monotonic()
    written = storage.write_bytes("kg-00000/during.log", b"during", "during.log")
    assert time.monotonic() - started >= 3  # it waited for the server
    assert storage.read_verified(entry, Where()) == b"before"
    assert storage.read_verified(written, Where()) == b"during"
    restarting.join()
    assert any("retrying for up to 30 s" in message for message in caplog.messages)


def test_an_outage_longer_than_the_budget_fails_naming_the_location_and_the_option(s3):
    location = f"s3://{s3.bucket}/long-outage"
    storage = CheckpointStorage(location, options=s3.storage_options(retry_seconds=2))
    entry = storage.write_bytes("kg-00000/a.log", b"a", "a.log")
    s3.kill()
    with pytest.raises(StorageUnavailableError) as failure:
        storage.write_bytes("kg-00000/b.log", b"b", "b.log")
    message = str(failure.value)
    assert location in message and "retrying for 2 s" in message and "state_storage_options['retry_seconds']" in message
    # a read that cannot reach the store is an outage, never mistaken for a damaged snapshot
    with pytest.raises(StorageUnavailableError):
        storage.read_verified(entry, Where())
    s3.start()
    with pytest.raises(SnapshotCorruptedError, match="missing or unreadable"):
        storage.read_verified(FileEntry("kg-00000/gone.log", "gone.log", 1, "00"), Where())


def test_the_options_never_show_their_secrets():
    options = StorageOptions.parse({"access_key": "AKIA1", "secret_key": "hunter2", "session_token": "tok3n",
                                    "endpoint_url": "http://127.0.0.1:9000"})
    assert "hunter2" not in repr(options) and "tok3n" not in repr(options)
    assert "endpoint_override='127.0.0.1:9000'" in repr(options) and "scheme='http'" in repr(options)


def test_key_group_versions_on_s3_delete_replaced_bases_and_leave_no_objects_behind(s3, tmp_path):
    storage = CheckpointStorage(f"s3://{s3.bucket}/retained", options=s3.storage_options())
    versions = KeyGroupVersions(storage, key_group=0, num_key_groups=8)
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=8)
    count = backend.get_or_create_state(ValueStateDescriptor("count", int))
    record = None
    for batch in range(5):
        backend.open_key_group(str(tmp_path / "local"))
        for key in range(50):
            backend.set_current_key(f"k{key}")
            count.update(key * batch)
        backend.take_changes()
        backend.checkpoint(str(tmp_path / f"base-{batch}"))
        record, _ = versions.write_base(record, str(tmp_path / f"base-{batch}"), batch, f"{batch:04x}",
                                        backend.state_metadata(), backend.raw_column_names(), retain_batches=1)
        backend.close_key_group()
    backend.close()
    root = s3.data_dir / s3.bucket / "retained"
    on_s3 = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    kept = [versions.read_manifest(record.base, 4)] + [
        SnapshotManifest.from_bytes(storage.read_bytes(f"kg-00000/b{3:012d}-0003.json"), "base 3")]
    named = {entry.path for manifest in kept for entry in manifest.files}
    # base 3 stays while a retried batch 4 may restore it; bases 0..2 and every object only they named are gone
    assert on_s3 == named | {record.base.path, f"kg-00000/b{3:012d}-0003.json"}


@pytest.mark.parametrize("uri", ["s3://AKIAEXAMPLE:hunter2@bucket/state", "s3://bucket/state?secret_key=hunter2",
                                 "s3://bucket/state?session_token=hunter2&scheme=http"])
def test_credentials_in_the_uri_are_refused_naming_where_they_go_without_echoing_them(uri):
    # a location is logged, shown in errors and saved in the state files: a secret in it would be everywhere
    with pytest.raises(ConfigurationError) as refused:
        CheckpointStorage(uri)
    message = str(refused.value)
    assert "hunter2" not in message
    assert "carries credentials" in message and "*********(redacted)" in message
    assert "state_storage_options (access_key, secret_key, session_token)" in message
    assert "AWS_SECRET_ACCESS_KEY" in message


def test_the_repr_of_storage_options_which_specs_and_logs_show_hides_every_secret():
    options = StorageOptions.parse({"access_key": "AKIAEXAMPLE", "secret_key": "hunter2", "session_token": "hunter3",
                                    "region": "eu-west-1"})
    shown = repr(options)
    assert "hunter2" not in shown and "hunter3" not in shown
    assert "secret_key='*********(redacted)'" in shown and "access_key='AKIAEXAMPLE'" in shown
    assert options.s3["secret_key"] == "hunter2"  # the executors still get it
