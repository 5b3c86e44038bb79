"""A key group's durable versions: base + changelogs restore exactly, damage is named, old files are collected."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from types import SimpleNamespace

import msgpack
import pytest

from keyedstate import Types, ValueStateDescriptor
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, SnapshotCorruptedError
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy, VersionRecord


@pytest.fixture
def chain(tmp_path):
    """Batches 0..5 of one key group: a base at batch 0 and at batch 3, changelogs in between."""
    storage = CheckpointStorage(tmp_path / "storage")
    versions = KeyGroupVersions(storage, key_group=3, num_key_groups=8)
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=8)
    count = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    record = None
    for batch in range(6):
        backend.open_key_group(str(tmp_path / "local"))
        for key in range(batch * 3, batch * 3 + 40):
            backend.set_current_key(f"k{key}")
            count.update((count.value() or 0) + 1)
        changes = backend.take_changes()
        tag = f"{batch:04x}"
        if batch in (0, 3):
            backend.checkpoint(str(tmp_path / f"ckpt-{batch}"))
            record, _ = versions.write_base(record, str(tmp_path / f"ckpt-{batch}"), batch, tag,
                                            backend.state_metadata(), backend.raw_column_names(), retain_batches=100)
        else:
            record = versions.write_changelog(record, changes.encode(), batch, tag)
        expected = sorted(backend.iter_stored_records("count"))
        backend.close_key_group()
    backend.close()
    return storage, versions, record, expected


def restored(versions: KeyGroupVersions, record: VersionRecord, path: str) -> list:
    changelogs = versions.restore(record, path)
    backend = RocksDBKeyedStateBackend(path, num_key_groups=8, options=RocksDBOptions(reuse_existing=True))
    for changelog in changelogs:
        backend.replay(changelog)
    records = sorted(backend.iter_stored_records("count"))
    backend.close()
    return records


def test_the_base_plus_its_changelogs_restore_the_last_version(chain, tmp_path):
    storage, versions, record, expected = chain
    assert record.base_batch == 3 and len(record.changelogs) == 2
    assert VersionRecord.from_bytes(record.to_bytes()) == record
    assert restored(versions, record, str(tmp_path / "restore")) == expected


def test_a_records_bootstrap_origin_round_trips_and_records_without_one_keep_their_bytes(chain):
    _, _, record, _ = chain
    assert not record.origin
    plain = record.to_bytes()
    assert len(msgpack.unpackb(plain, raw=False)) == 9  # what keyedstate wrote before origins existed
    with_origin = replace(record, origin="b0075")
    assert VersionRecord.from_bytes(with_origin.to_bytes()) == with_origin
    assert msgpack.unpackb(with_origin.to_bytes(), raw=False)[:9] == msgpack.unpackb(plain, raw=False)


def test_a_flipped_byte_in_any_referenced_file_is_named(chain, tmp_path):
    storage, versions, record, _ = chain
    manifest = versions.read_manifest(record.base, record.base_batch)
    for relative in [record.changelogs[-1].path] + [e.path for e in manifest.files if e.name.endswith(".sst")][:1]:
        path = os.path.join(storage.root, relative)
        original = open(path, "rb").read()
        damaged = bytearray(original)
        damaged[len(damaged) // 2] ^= 1
        open(path, "wb").write(bytes(damaged))
        with pytest.raises(SnapshotCorruptedError, match=f"{relative}.*corrupt.*sha256"):
            restored(versions, record, str(tmp_path / "restore"))
        open(path, "wb").write(original)
    assert os.path.isdir(tmp_path / "restore")


def test_a_new_base_reuploads_no_stored_sst_and_collects_what_no_kept_base_names(chain, tmp_path):
    storage, versions, record, expected = chain
    manifests = [p for p in storage.list_files("kg-00003") if p.count("/") == 1 and p.endswith(".json")]
    assert len(manifests) == 2  # bases of batch 0 and 3: 0 is kept while retained records may name it
    restored(versions, record, str(tmp_path / "db"))
    # A base written from the unchanged database uploads no SST again.
    backend = KeyGroupRocksDBBackend(tmp_path / "db", num_key_groups=8)
    backend.checkpoint(str(tmp_path / "again"))
    metadata, raw = backend.state_metadata(), backend.raw_column_names()
    backend.close()
    stored_before = set(storage.list_files("kg-00003/sst"))
    newest, uploaded = versions.write_base(record, str(tmp_path / "again"), 6, "0006", metadata, raw, retain_batches=1)
    manifest = versions.read_manifest(newest.base, 6)
    reused = [e for e in manifest.files if e.shared and e.path in stored_before]
    new_files = [e for e in manifest.files if e not in reused]
    assert reused  # the restored base's SSTs are named again, not uploaded again
    assert uploaded == sum(e.size for e in new_files) + newest.base.size
    # retain_batches=1: Spark keeps only the newest version, but a retry of batch 6 would restore the version of
    # batch 5 (base 3 + changelogs 4, 5): that stays until the next base; base 0 and changelogs 1, 2 go
    assert newest.retired == ((3, 6),)
    remaining = storage.list_files("kg-00003")
    assert [p for p in remaining if p.count("/") == 1 and p.endswith(".json")] == [record.base.path, newest.base.path]
    assert [p for p in remaining if p.startswith("kg-00003/c")] == [c.path for c in record.changelogs]
    assert restored(versions, record, str(tmp_path / "retry")) == expected
    assert restored(versions, newest, str(tmp_path / "final")) == expected
    shutil.rmtree(tmp_path / "again")


def test_the_policy_bounds_changelogs_by_count_and_by_size_relative_to_the_base():
    policy = SnapshotPolicy(max_changelogs=3, changelog_to_base_ratio=0.5, min_changelog_bytes=100)
    assert policy.wants_base(None, 101) and not policy.wants_base(None, 100)
    base = VersionRecord("t", object(), 1, 10_000)  # type: ignore[arg-type]
    assert not policy.wants_base(base, 4_000)
    assert policy.wants_base(base, 5_001)
    assert not policy.must_write_base(base, 5_001)  # a copy holding few of the base's files may wait ...
    assert policy.must_write_base(base, 10_001)  # ... for as much again (wait_for_descendant=1.0)


def first_count_asking_for_a_base(policy: SnapshotPolicy, key_group: int, must: bool = False) -> int:
    """Changelogs since a large base (bytes never bind) when the key group's policy first asks for the next base."""
    ask = policy.must_write_base if must else policy.wants_base
    for count in range(1, 1000):
        changelogs = (SimpleNamespace(size=0),) * (count - 1)
        record = VersionRecord("t", object(), 1, 1 << 40, changelogs=changelogs)  # type: ignore[arg-type]
        if ask(record, 1, key_group):
            return count
    raise AssertionError("never asks")


def test_without_a_spread_key_groups_with_one_history_ask_for_their_bases_in_the_same_call():
    assert {first_count_asking_for_a_base(SnapshotPolicy(), key_group) for key_group in range(128)} == {65}


def test_a_spread_gives_each_key_group_its_own_bound_so_a_shared_history_writes_its_bases_in_many_batches():
    """As after a bulk load: 128 key groups whose bases were written in one batch ask for their next ones at
    between 0.75 and 1.25 times 64 changelogs, a few key groups per batch, instead of all together."""
    policy = SnapshotPolicy(spread=0.25)
    counts = [first_count_asking_for_a_base(policy, key_group) for key_group in range(128)]
    assert min(counts) >= 49 and max(counts) <= 81, counts
    assert len(set(counts)) >= 30 and max(counts.count(count) for count in counts) <= 6, sorted(counts)
    assert counts[0] == 65  # key group 0 keeps the unscaled bound
    for key_group in (1, 7, 100):  # the wait for the copy holding the base scales with the bound
        assert first_count_asking_for_a_base(policy, key_group, must=True) == pytest.approx(
            2 * (counts[key_group] - 1), abs=2)


def test_a_spread_scales_the_byte_bound_too():
    policy = SnapshotPolicy(spread=0.5, max_changelogs=1000)
    base = VersionRecord("t", object(), 1, 10_000_000)  # type: ignore[arg-type]
    low, high = min(range(64), key=policy.scale), max(range(64), key=policy.scale)
    assert policy.wants_base(base, int(10_000_000 * policy.scale(low)) + 1, low)
    assert not policy.wants_base(base, int(10_000_000 * policy.scale(high)) - 1, high)
    assert policy.scale(low) < 0.6 and policy.scale(high) > 1.4


@pytest.mark.parametrize("spread", [1, 1.5])
def test_a_spread_of_one_or_more_is_refused(spread):
    with pytest.raises(ConfigurationError, match="SnapshotPolicy.spread must be below 1"):
        SnapshotPolicy(spread=spread)


@pytest.mark.parametrize("field, value", [("max_changelogs", -1), ("wait_for_descendant", -0.5),
                                          ("min_changelog_bytes", "1 MiB"), ("changelog_to_base_ratio", None),
                                          ("spread", -0.25)])
def test_a_policy_refuses_a_negative_or_non_numeric_bound(field, value):
    with pytest.raises(ConfigurationError, match=f"SnapshotPolicy.{field} must be a number >= 0"):
        SnapshotPolicy(**{field: value})


def test_a_line_continued_from_an_older_retained_version_keeps_what_it_names_and_collects_the_abandoned_one(tmp_path):
    """A checkpoint rewound to an older batch: Spark restarts from the row of batch K while files of batches after K
    exist. The new line never needs them (file names carry each call's tag), its own retained versions stay
    restorable, and the abandoned line's files go once they fall out of the retained batches."""
    retain, last, rewound = 3, 11, 9
    storage = CheckpointStorage(tmp_path / "storage")
    versions = KeyGroupVersions(storage, key_group=3, num_key_groups=8)
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=8)
    count = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))

    def write(record, local, batch, tag, step):
        backend.open_key_group(str(local))
        for key in range(batch * 3, batch * 3 + 40):
            backend.set_current_key(f"k{key}")
            count.update((count.value() or 0) + step)
        changes = backend.take_changes()
        if batch % 3 == 0:
            backend.checkpoint(str(tmp_path / "ckpt"))
            record, _ = versions.write_base(record, str(tmp_path / "ckpt"), batch, tag, backend.state_metadata(),
                                            backend.raw_column_names(), retain_batches=retain)
            shutil.rmtree(tmp_path / "ckpt")
        else:
            record = versions.write_changelog(record, changes.encode(), batch, tag)
        expected = sorted(backend.iter_stored_records("count"))
        backend.close_key_group()
        return record, expected

    first: dict[int, tuple] = {}
    record = None
    for batch in range(last + 1):
        record, expected = write(record, tmp_path / "first", batch, f"a{batch:03x}", 1)
        first[batch] = (record, expected)
    assert restored(versions, first[rewound][0], str(tmp_path / "check")) == first[rewound][1]

    # The restart: the row of batch K, restored like any rebuild, then batches K + 1, ... again with other input.
    record = first[rewound][0]
    changelogs = versions.restore(record, str(tmp_path / "second"))
    backend.open_key_group(str(tmp_path / "second"))
    for changelog in changelogs:
        backend.replay(changelog)
    backend.close_key_group()
    second: dict[int, tuple] = {}
    for batch in range(rewound + 1, last + 2 * retain + 4):
        record, expected = write(record, tmp_path / "second", batch, f"b{batch:03x}", 2)
        second[batch] = (record, expected)
        for older in range(max(rewound + 1, batch - retain), batch + 1):  # what Spark retains, and the retry's
            assert restored(versions, second[older][0], str(tmp_path / "check")) == second[older][1], (batch, older)
    backend.close()
    names = [p.rsplit("/", 1)[-1] for p in storage.list_files("kg-00003") if p.count("/") == 1]
    assert names and not [name for name in names if name[1:].startswith(tuple(f"{b:012d}-a" for b in range(last + 1)))]
    manifests = [p for p in storage.list_files("kg-00003") if p.count("/") == 1 and p.endswith(".json")]
    named = set().union(*(versions._manifest_paths(p.split("/", 1)[1]) for p in manifests))
    assert set(storage.list_files("kg-00003/sst")) <= named  # no SST only the abandoned line named
