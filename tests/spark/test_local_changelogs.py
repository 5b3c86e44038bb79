"""The executor-local changelog cache of RocksDB mode: a copy that catches up reads the changelogs written on this
machine from local disk, trusts a cached file only when it matches the version record, and the cache lasts only as
long as a copy could need it."""

from __future__ import annotations

import logging

from keyedstate.state.rocksdb.versions import SnapshotPolicy
from tests.spark import test_rocksdb_mode_calls
from tests.spark.test_group_function_unit import FakeGroupState
from tests.spark.test_rocksdb_mode_calls import _run_with_an_older_copy, call, changelog_cache

worker = test_rocksdb_mode_calls.worker  # the fixture: a worker process's group function for a RocksDB-mode query


def stored_changelogs(tmp_path, except_tag: str = "") -> list:
    return sorted(path for path in (tmp_path / "storage").rglob("c*.log") if except_tag not in path.name or
                  not except_tag)


def test_every_changelog_written_is_also_kept_on_local_disk_with_the_same_bytes(worker, tmp_path):
    function, state = worker(reuse=False), FakeGroupState()
    for _ in range(3):
        call(function, ["a"], state)
    stored = {path.name: path.read_bytes() for path in stored_changelogs(tmp_path)}
    cached = {path.name: path.read_bytes() for path in changelog_cache(tmp_path).iterdir()}
    assert len(stored) == 3 and cached == stored  # no temporary file left either


def test_a_copy_behind_catches_up_from_the_local_changelogs_without_reading_storage(worker, tmp_path):
    function, state, older_tag = _run_with_an_older_copy(worker, tmp_path)
    missed = stored_changelogs(tmp_path, except_tag=older_tag)
    assert len(missed) == 2
    for path in missed:
        path.unlink()  # a read from storage would fail now
    assert call(function, ["a"], state) == [("a", 4)]
    assert call(function, ["a"], state) == [("a", 5)]


def test_a_damaged_local_changelog_is_deleted_and_the_changelog_read_from_storage(worker, tmp_path, caplog):
    function, state, older_tag = _run_with_an_older_copy(worker, tmp_path)
    damaged = sorted(path for path in changelog_cache(tmp_path).iterdir() if older_tag not in path.name)[0]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="keyedstate"):
        assert call(function, ["a"], state) == [("a", 4)]
    assert not damaged.exists()
    warnings = [r for r in caplog.records if r.name.startswith("keyedstate.") and damaged.name in r.getMessage()]
    assert warnings and "corrupt" in warnings[0].getMessage()
    assert call(function, ["a"], state) == [("a", 5)]


def test_a_local_changelog_of_another_size_is_not_used_either(worker, tmp_path):
    function, state, older_tag = _run_with_an_older_copy(worker, tmp_path)
    truncated = sorted(path for path in changelog_cache(tmp_path).iterdir() if older_tag not in path.name)[-1]
    truncated.write_bytes(truncated.read_bytes()[:-1])  # as a half-written file would be
    assert call(function, ["a"], state) == [("a", 4)]
    assert not truncated.exists()


def test_a_new_base_keeps_only_the_local_changelogs_its_bridge_names(worker, tmp_path):
    function, state = worker(reuse=False, snapshot_policy=SnapshotPolicy(max_changelogs=2)), FakeGroupState()

    def cached() -> set[str]:
        return {path.name for path in changelog_cache(tmp_path).iterdir()}

    def stored() -> set[str]:
        return {path.name for path in stored_changelogs(tmp_path)}

    for _ in range(3):  # two changelogs, then a base; the base's batch stores its changes as the bridge's last one
        call(function, ["a"], state)
    first_chain = stored()
    assert len(first_chain) == 3 and cached() == first_chain and len(list((tmp_path / "storage").rglob("b*.json"))) == 1
    for _ in range(3):  # the same again: the second base's bridge is the second chain
        call(function, ["a"], state)
    assert len(list((tmp_path / "storage").rglob("b*.json"))) == 2
    second_chain = stored() - first_chain
    assert len(second_chain) == 3 and cached() == second_chain
    assert call(function, ["a"], state) == [("a", 7)]
