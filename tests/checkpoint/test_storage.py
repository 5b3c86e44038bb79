"""Checkpoint storage, manifests, the record file format and restore planning, without a backend."""

from __future__ import annotations

import json
import os

import pytest

from keyedstate.checkpoint import (
    CheckpointListener,
    CheckpointStorage,
    SnapshotManifest,
    assign_key_groups,
    covering_manifests,
    decode_record_file,
    encode_record_file,
)
from keyedstate.errors import ConfigurationError, SnapshotCorruptedError, SnapshotError
from keyedstate.keygroups import KeyGroupRange
from keyedstate.state.base.backend import StateMetadata


def make_manifest(checkpoint_id, scope="kg-0-127", files=(), key_groups=(0, 127), created=0, max_parallelism=128):
    return SnapshotManifest(
        checkpoint_id=checkpoint_id, scope=scope, backend_kind="rocksdb",
        key_group_range=KeyGroupRange(*key_groups), max_parallelism=max_parallelism,
        states=[StateMetadata("count", "value", "value<LONG>", False)], raw_columns=["timers"],
        files=list(files), uploaded_bytes=sum(f.size for f in files), total_bytes=sum(f.size for f in files),
        created_at_ms=created,
    )


@pytest.fixture
def storage(tmp_path):
    return CheckpointStorage(tmp_path / "root", retained_checkpoints=2)


def test_checkpoint_listener_is_still_exported():
    assert CheckpointListener.__name__ == "CheckpointListener"


# ---- manifests -------------------------------------------------------------------------------------------------------


def test_manifest_json_round_trip_and_fields(storage):
    entry = storage.write_bytes("chk-1/kg-0-127/data", b"hello", "data")
    manifest = make_manifest(1, files=[entry])
    storage.write_manifest(manifest)
    loaded = storage.load_manifest(1, "kg-0-127")
    assert loaded == manifest and loaded.storage is storage
    body = json.loads(open(os.path.join(storage.root, "chk-1/kg-0-127/_MANIFEST.json")).read())
    assert body["format_version"] == 1 and body["checksum_algorithm"] == "sha256"
    assert body["files"][0] == {"path": "chk-1/kg-0-127/data", "name": "data", "size": 5, "shared": False,
                                "checksum": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}
    assert body["uploaded_bytes"] == 5 and body["total_bytes"] == 5 and body["raw_columns"] == ["timers"]
    assert storage.list_files() == ["chk-1/kg-0-127/_MANIFEST.json", "chk-1/kg-0-127/data"]  # no temp file left


def test_a_tampered_or_newer_manifest_is_rejected(storage):
    storage.write_manifest(make_manifest(1))
    path = os.path.join(storage.root, "chk-1/kg-0-127/_MANIFEST.json")
    body = json.loads(open(path).read())
    body["total_bytes"] = 999
    open(path, "w").write(json.dumps(body))
    with pytest.raises(SnapshotCorruptedError, match="checksum"):
        storage.load_manifest(1, "kg-0-127")
    data = make_manifest(2).to_json()
    data.pop("manifest_checksum")
    data["format_version"] = 99
    from keyedstate.checkpoint.manifest import _body_checksum

    data["manifest_checksum"] = _body_checksum(data)
    with pytest.raises(SnapshotCorruptedError, match="format version 99"):
        SnapshotManifest.from_bytes(json.dumps(data).encode(), "x")


# ---- verified reads ------------------------------------------------------------------------------------------------


def test_verified_reads_name_the_file_and_checkpoint(storage, tmp_path):
    entry = storage.write_bytes("chk-3/s/blob", b"0123456789", "blob")
    manifest = make_manifest(3, scope="s", files=[entry])
    assert storage.read_verified(entry, manifest) == b"0123456789"
    storage.download_verified(entry, manifest, str(tmp_path / "copy"))
    assert (tmp_path / "copy").read_bytes() == b"0123456789"
    with open(os.path.join(storage.root, entry.path), "r+b") as file:
        file.write(b"X")
    with pytest.raises(SnapshotCorruptedError, match=r"chk-3/s/blob of checkpoint 3 scope s.*corrupt"):
        storage.read_verified(entry, manifest)
    with pytest.raises(SnapshotCorruptedError, match="corrupt"):
        storage.download_verified(entry, manifest, str(tmp_path / "copy2"))
    os.remove(os.path.join(storage.root, entry.path))
    with pytest.raises(SnapshotCorruptedError, match=r"chk-3/s/blob of checkpoint 3.*missing"):
        storage.read_verified(entry, manifest)


def test_upload_file_hashes_what_it_copies(storage, tmp_path):
    local = tmp_path / "f.sst"
    local.write_bytes(b"a" * 10_000)
    entry = storage.upload_file(str(local), "shared/s/f.sst", "f.sst", shared=True)
    assert entry.size == 10_000 and entry.shared
    with pytest.raises(SnapshotError, match="changed"):
        storage.upload_file(str(local), "shared/s/g.sst", "g.sst", checksum="0" * 64)


# ---- locations and names ---------------------------------------------------------------------------------------------


def test_uri_locations_and_bad_locations(tmp_path):
    storage = CheckpointStorage(f"file://{tmp_path}/uri-root")
    storage.write_bytes("chk-1/s/x", b"1", "x")
    assert os.path.exists(tmp_path / "uri-root" / "chk-1" / "s" / "x")
    with pytest.raises(ConfigurationError, match="nosuchscheme"):
        CheckpointStorage("nosuchscheme://bucket/path")
    with pytest.raises(ConfigurationError, match="retained_checkpoints"):
        CheckpointStorage(tmp_path, retained_checkpoints=0)
    with pytest.raises(ConfigurationError, match="scope"):
        CheckpointStorage.check_scope("../escape")


def test_checkpoint_ids_sort_numerically_and_ignore_other_entries(storage):
    for checkpoint_id in (2, 10, 9):
        storage.write_manifest(make_manifest(checkpoint_id))
    storage.write_bytes("chk-notanumber/x", b"", "x")
    storage.write_bytes("chk-11/s/half-written", b"", "x")  # no manifest: not a snapshot of scope s
    assert storage.list_checkpoint_ids() == [2, 9, 10, 11]
    assert storage.checkpoint_ids_of_scope("kg-0-127") == [2, 9, 10]
    assert storage.scopes_of(11) == []


# ---- retention -------------------------------------------------------------------------------------------------------


def test_retention_deletes_only_files_that_no_retained_manifest_references(storage):
    shared_by_all = storage.write_bytes("shared/s/a.sst", b"a", "a.sst", shared=True)
    only_first = storage.write_bytes("shared/s/b.sst", b"b", "b.sst", shared=True)
    first_and_third = storage.write_bytes("shared/s/c.sst", b"c", "c.sst", shared=True)
    other_scope = storage.write_bytes("shared/t/a.sst", b"a", "a.sst", shared=True)
    storage.write_manifest(make_manifest(1, "t", [other_scope]))
    for checkpoint_id, files in ((1, [shared_by_all, only_first, first_and_third]), (2, [shared_by_all]),
                                 (3, [shared_by_all, first_and_third])):
        private = storage.write_bytes(f"chk-{checkpoint_id}/s/MANIFEST-1", b"m", "MANIFEST-1")
        storage.write_manifest(make_manifest(checkpoint_id, "s", files + [private]))
        deleted = storage.apply_retention("s")
    assert sorted(deleted) == ["chk-1/s/MANIFEST-1", "chk-1/s/_MANIFEST.json", "shared/s/b.sst"]
    assert storage.list_files() == sorted([
        "chk-1/t/_MANIFEST.json", "chk-2/s/MANIFEST-1", "chk-2/s/_MANIFEST.json", "chk-3/s/MANIFEST-1",
        "chk-3/s/_MANIFEST.json", "shared/s/a.sst", "shared/s/c.sst", "shared/t/a.sst",
    ])
    assert storage.checkpoint_ids_of_scope("t") == [1]  # other scopes keep their own snapshots


# ---- restore planning ------------------------------------------------------------------------------------------------


def test_key_groups_are_assigned_to_exactly_one_manifest_each():
    left, right = make_manifest(1, "a", key_groups=(0, 63)), make_manifest(1, "b", key_groups=(64, 127))
    plan = assign_key_groups([left, right], KeyGroupRange(40, 90), 128)
    assert [(m.scope, r) for m, r in plan] == [("a", [KeyGroupRange(40, 63)]), ("b", [KeyGroupRange(64, 90)])]
    newer = make_manifest(1, "c", key_groups=(50, 70), created=5)
    plan = assign_key_groups([left, right, newer], KeyGroupRange(0, 127), 128)
    assigned = [kg for _, ranges in plan for r in ranges for kg in r]
    assert sorted(assigned) == list(range(128))
    assert dict((m.scope, r) for m, r in plan)["c"] == [KeyGroupRange(50, 70)]


def test_coverage_and_max_parallelism_checks():
    left = make_manifest(1, "a", key_groups=(0, 63))
    assert covering_manifests([left], KeyGroupRange(0, 127)) is None
    assert covering_manifests([left], KeyGroupRange(10, 20)) == [left]
    with pytest.raises(SnapshotError, match="key group 64"):
        assign_key_groups([left], KeyGroupRange(0, 64), 128)
    with pytest.raises(ConfigurationError, match="max_parallelism"):
        assign_key_groups([make_manifest(1, max_parallelism=256, key_groups=(0, 255))], KeyGroupRange(0, 127), 128)


# ---- record files ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [True, False])
def test_record_file_round_trip(compress):
    records = [(bytes([i % 256, i // 256]) + b"key", b"v" * (i % 7)) for i in range(1_000)]
    data = encode_record_file([(1, "state \u00e9", records), (2, "timers", []), (1, "empty", [])], compress)
    assert [(k, n, r) for k, n, r in decode_record_file(data, "f")] == [
        (1, "state \u00e9", records), (2, "timers", []), (1, "empty", [])]


def test_damaged_record_files_are_reported():
    data = encode_record_file([(1, "s", [(b"k" * 10, b"v" * 10)])], compress=False)
    with pytest.raises(SnapshotCorruptedError, match="not a keyedstate record file"):
        list(decode_record_file(b"junk" + data, "f"))
    with pytest.raises(SnapshotCorruptedError, match="truncated"):
        list(decode_record_file(data[:-8], "f"))
