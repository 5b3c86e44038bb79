"""A local database a few versions behind catches up across a new base: the record names a bridge (the previous
chain's last changelogs and the changelog of the base's own batch), so the copy replays those instead of being
rebuilt from the base; when a bridge file cannot be read, it is rebuilt from the base, with the same result."""

from __future__ import annotations

import logging
import shutil

from keyedstate.state.rocksdb.versions import SnapshotPolicy
from tests.spark import test_rocksdb_mode_calls
from tests.spark.test_rocksdb_mode_calls import _run_with_an_older_copy, call, changelog_cache

worker = test_rocksdb_mode_calls.worker  # the fixture: a worker process's group function for a RocksDB-mode query

BASE_AT_THE_THIRD_CALL = SnapshotPolicy(max_changelogs=2)


def stored_bases(tmp_path) -> list:
    return sorted((tmp_path / "storage").rglob("b*.json"))


def test_a_copy_behind_a_new_base_replays_the_bridge_and_never_reads_the_base(worker, tmp_path, caplog):
    function, state, older_tag = _run_with_an_older_copy(worker, tmp_path, snapshot_policy=BASE_AT_THE_THIRD_CALL)
    (base,) = stored_bases(tmp_path)  # the third call wrote a base: the old copy is behind it
    base.unlink()  # a rebuild would need the base's manifest: replaying the bridge does not
    shutil.rmtree(base.with_suffix(""), ignore_errors=True)
    shutil.rmtree(tmp_path / "storage" / base.parent.name / "sst", ignore_errors=True)
    with caplog.at_level(logging.INFO, logger="keyedstate"):
        assert call(function, ["a"], state) == [("a", 4)]
    assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]
    assert call(function, ["a"], state) == [("a", 5)]


def test_a_bridge_changelog_that_is_gone_rebuilds_from_the_base_with_the_same_result(worker, tmp_path, caplog):
    function, state, older_tag = _run_with_an_older_copy(worker, tmp_path, snapshot_policy=BASE_AT_THE_THIRD_CALL)
    missed = sorted(path for path in (tmp_path / "storage").rglob("c*.log") if older_tag not in path.name)
    assert len(missed) == 2  # the second call's changelog and the base batch's own
    shutil.rmtree(changelog_cache(tmp_path))  # as on a machine that did not write them
    missed[0].unlink()
    with caplog.at_level(logging.INFO, logger="keyedstate"):
        assert call(function, ["a"], state) == [("a", 4)]
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("keyedstate.")]
    assert any("instead of catching up across it" in m and missed[0].name in m for m in messages)
    assert any("rebuilding the local state" in m for m in messages)
    assert call(function, ["a"], state) == [("a", 5)]
