"""Durable state storage and the base snapshot manifest format, without a backend."""

from __future__ import annotations

import json
import os

import pytest

from keyedstate.checkpoint import CheckpointListener, CheckpointStorage, SnapshotManifest
from keyedstate.errors import ConfigurationError, SnapshotCorruptedError, SnapshotError
from keyedstate.keygroups import KeyGroupRange
from keyedstate.state.base.backend import StateMetadata


def make_manifest(checkpoint_id, scope="kg-00003", files=(), key_groups=(3, 3), created=0, num_key_groups=128):
    return SnapshotManifest(
        checkpoint_id=checkpoint_id, scope=scope, backend_kind="rocksdb",
        key_group_range=KeyGroupRange(*key_groups), num_key_groups=num_key_groups,
        states=[StateMetadata("count", "value", "value<LONG>", False)], raw_columns=["timers"],
        files=list(files), uploaded_bytes=sum(f.size for f in files), total_bytes=sum(f.size for f in files),
        created_at_ms=created,
    )


class Where:
    def __init__(self, text: str) -> None:
        self.text = text

    def describe(self) -> str:
        return self.text


@pytest.fixture
def storage(tmp_path):
    return CheckpointStorage(tmp_path / "root")


def test_checkpoint_listener_is_still_exported():
    assert CheckpointListener.__name__ == "CheckpointListener"


# ---- base snapshot manifests -----------------------------------------------------------------------------------------


def test_manifest_json_round_trip_and_fields(storage):
    entry = storage.write_bytes("kg-00003/b1-t/data", b"hello", "data")
    manifest = make_manifest(1, files=[entry])
    stored = storage.write_bytes("kg-00003/b1-t.json", manifest.to_bytes(), "b1-t.json")
    loaded = SnapshotManifest.from_bytes(storage.read_verified(stored, Where("base 1")), "b1-t.json")
    assert loaded == manifest
    body = json.loads(manifest.to_bytes())
    assert body["format_version"] == 1 and body["checksum_algorithm"] == "sha256"
    assert body["files"][0] == {"path": "kg-00003/b1-t/data", "name": "data", "size": 5, "shared": False,
                                "checksum": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}
    assert body["uploaded_bytes"] == 5 and body["total_bytes"] == 5 and body["raw_columns"] == ["timers"]


def test_a_tampered_or_newer_manifest_is_rejected():
    body = json.loads(make_manifest(1).to_bytes())
    body["total_bytes"] = 999
    with pytest.raises(SnapshotCorruptedError, match="checksum"):
        SnapshotManifest.from_bytes(json.dumps(body).encode(), "x")
    data = make_manifest(2).to_json()
    data.pop("manifest_checksum")
    data["format_version"] = 99
    from keyedstate.checkpoint.manifest import _body_checksum

    data["manifest_checksum"] = _body_checksum(data)
    with pytest.raises(SnapshotCorruptedError, match="format version 99"):
        SnapshotManifest.from_bytes(json.dumps(data).encode(), "x")



def test_a_manifest_that_names_the_key_group_count_max_parallelism_still_reads():
    from keyedstate.checkpoint.manifest import _body_checksum

    data = make_manifest(3, num_key_groups=16).to_json()
    data.pop("manifest_checksum")
    data["max_parallelism"] = data.pop("num_key_groups")
    data["manifest_checksum"] = _body_checksum(data)
    assert SnapshotManifest.from_bytes(json.dumps(data).encode(), "x").num_key_groups == 16

# ---- verified reads ------------------------------------------------------------------------------------------------


def test_verified_reads_name_the_file_and_what_it_belongs_to(storage, tmp_path):
    entry = storage.write_bytes("kg-00003/c3-t.log", b"0123456789", "c3-t.log")
    where = Where("key group 3 changelog c3-t.log")
    assert storage.read_verified(entry, where) == b"0123456789"
    storage.download_verified(entry, where, str(tmp_path / "copy"))
    assert (tmp_path / "copy").read_bytes() == b"0123456789"
    with open(os.path.join(storage.root, entry.path), "r+b") as file:
        file.write(b"X")
    with pytest.raises(SnapshotCorruptedError, match=r"kg-00003/c3-t.log of key group 3 changelog .*corrupt"):
        storage.read_verified(entry, where)
    with pytest.raises(SnapshotCorruptedError, match="corrupt"):
        storage.download_verified(entry, where, str(tmp_path / "copy2"))
    os.remove(os.path.join(storage.root, entry.path))
    with pytest.raises(SnapshotCorruptedError, match=r"kg-00003/c3-t.log of key group 3.*missing"):
        storage.read_verified(entry, where)


def test_upload_file_hashes_what_it_copies(storage, tmp_path):
    local = tmp_path / "f.sst"
    local.write_bytes(b"a" * 10_000)
    entry = storage.upload_file(str(local), "kg-00000/sst/f.sst", "f.sst", shared=True)
    assert entry.size == 10_000 and entry.shared
    with pytest.raises(SnapshotError, match="changed"):
        storage.upload_file(str(local), "kg-00000/sst/g.sst", "g.sst", checksum="0" * 64)


# ---- locations and names ---------------------------------------------------------------------------------------------


def test_uri_locations_and_bad_locations(tmp_path):
    storage = CheckpointStorage(f"file://{tmp_path}/uri-root")
    storage.write_bytes("kg-00001/x", b"1", "x")
    assert os.path.exists(tmp_path / "uri-root" / "kg-00001" / "x")
    with pytest.raises(ConfigurationError, match="nosuchscheme"):
        CheckpointStorage("nosuchscheme://bucket/path")
    with pytest.raises(ConfigurationError, match="scope"):
        CheckpointStorage.check_scope("../escape")


def test_listing_and_deleting_trees(storage):
    storage.write_bytes("kg-00001/sst/a.sst", b"a", "a.sst")
    storage.write_bytes("kg-00001/c1-t.log", b"c", "c1-t.log")
    assert {name for name, _, _ in storage.list_entries("kg-00001")} == {"sst", "c1-t.log"}
    assert storage.delete_tree("kg-00001/sst") == ["kg-00001/sst/a.sst"]
    assert storage.list_files() == ["kg-00001/c1-t.log"]
    assert storage.delete_tree("kg-00001/missing") == []


def _create_and_remove(directory: str, stop) -> None:
    while not stop.is_set():
        os.makedirs(directory, exist_ok=True)
        try:
            os.rmdir(directory)
        except OSError:
            pass


def test_listing_a_directory_another_process_is_creating_gives_its_entries_or_none(storage):
    """Several worker processes register in one directory at once; one of them lists it while another creates it."""
    import multiprocessing
    import time

    directory = os.path.join(storage.root, "_writers")
    stop = multiprocessing.get_context("spawn").Event()
    churn = multiprocessing.get_context("spawn").Process(target=_create_and_remove, args=(directory, stop))
    churn.start()
    try:
        listings, deadline = 0, time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert storage.list_entries("_writers") == []
            assert storage.list_files("_writers") == []
            listings += 1
    finally:
        stop.set()
        churn.join(10)
    assert listings > 1000


def test_a_replaced_file_is_read_whole_while_another_process_keeps_replacing_it(storage):
    import multiprocessing

    first, second = b"a" * 200_000, b"b" * 300_000
    storage.replace_bytes("record.json", first)
    stop = multiprocessing.Event()
    writer = multiprocessing.Process(target=_keep_replacing, args=(storage.location, stop, first, second))
    writer.start()
    try:
        seen = {storage.read_bytes("record.json") for _ in range(2_000)}
    finally:
        stop.set()
        writer.join(30)
    assert seen <= {first, second}  # never empty or a prefix: a plain rewrite truncates first
    assert not [name for name in storage.list_files("") if name.endswith(".tmp")]


def _keep_replacing(location: str, stop, first: bytes, second: bytes) -> None:
    storage = CheckpointStorage(location)
    while not stop.is_set():
        storage.replace_bytes("record.json", second)
        storage.replace_bytes("record.json", first)
