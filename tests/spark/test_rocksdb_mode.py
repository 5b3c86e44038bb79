"""RocksDB mode on Spark: state survives losing every executor-local database, damaged files are detected, and
durable storage holds base snapshots, changelogs and nothing a retained version no longer names."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from keyedstate.spark import read_keyed_state
from keyedstate.state.rocksdb.versions import SnapshotPolicy
from tests.spark.rocksdb_runs import SMALL_POLICY, output_of, run_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def rocksdb_backend(base: Path, policy: SnapshotPolicy = SMALL_POLICY) -> dict:
    return {"state_backend": "rocksdb", "state_storage": str(base / "state-storage"),
            "state_local_dir": str(base / "local"), "snapshot_policy": policy}


def stored(base: Path, pattern: str) -> list[Path]:
    return sorted((base / "state-storage").rglob(pattern))


def test_losing_every_local_database_between_batches_changes_no_output_and_no_state(spark, tmp_path, heap_run):
    def lose_local_databases():  # as a new executor would find its disk
        shutil.rmtree(tmp_path / "local", ignore_errors=True)

    run_batches(spark, tmp_path, range(8), between=lose_local_databases, **rocksdb_backend(tmp_path))
    expected_output, expected_state = heap_run
    assert len(expected_output) >= 5 and any(states.get("__timers__") for states in expected_state.values())
    assert output_of(spark, tmp_path) == expected_output
    assert read_keyed_state(spark, str(tmp_path / "checkpoint")) == expected_state
    assert stored(tmp_path, "b*.json") and stored(tmp_path, "c*.log")  # both bases and changelogs were restored


def test_local_databases_are_reused_when_they_hold_the_committed_version(spark, tmp_path, heap_run):
    first_seen: dict[str, int] = {}
    seen: set[str] = set()
    rebuilt: set[str] = set()

    def note_database_directories():  # a rebuild replaces the directory: a new inode
        # <query>/<uid>/kg-00007 and its copies kg-00007.c1, ...; not handles/<pid>/<symbolic links>
        present = {directory.name: directory.stat().st_ino
                   for directory in (tmp_path / "local").glob("*/*/kg-*[0-9]") if not directory.is_symlink()}
        for name in set(first_seen) - set(present):
            del first_seen[name]  # a key group left with no state has no database: its next one is new, not rebuilt
        for name, inode in present.items():
            if first_seen.setdefault(name, inode) != inode:
                rebuilt.add(name)
        seen.update(present)

    # A new base every sixth call of a key group or later: whichever worker Spark gives a key group, a copy that
    # missed calls catches up with the changelogs, across a base through its bridge. A copy two bases behind is
    # rebuilt (a bridge spans one base), which the two-changelog policy of the other tests makes likely when Spark
    # runs a partition in the same worker for a few batches in a row.
    policy = SnapshotPolicy(max_changelogs=5, min_changelog_bytes=1)
    run_batches(spark, tmp_path, range(8), between=note_database_directories, **rocksdb_backend(tmp_path, policy))
    assert stored(tmp_path, "b*.json")
    assert output_of(spark, tmp_path) == heap_run[0]
    assert len(seen) >= 5 and not rebuilt  # kept open, closed with its tag, or caught up: never rebuilt


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damaged", ["changelog", "sst"])
def test_a_flipped_byte_in_a_stored_file_fails_with_an_error_naming_the_file(spark, tmp_path, damaged):
    policy = SnapshotPolicy(max_changelogs=50, min_changelog_bytes=1)  # a base first, then changelogs
    run_batches(spark, tmp_path, range(3), **rocksdb_backend(tmp_path, policy))
    files = stored(tmp_path, "c*.log" if damaged == "changelog" else "*.sst")
    assert files
    victim = max(files, key=lambda p: p.stat().st_mtime) if damaged == "changelog" else files[0]
    flip_a_byte(victim)
    shutil.rmtree(tmp_path / "local")  # the next batch must restore from storage
    with pytest.raises(StreamingQueryException) as failure:
        run_batches(spark, tmp_path, range(3, 6), **rocksdb_backend(tmp_path, policy))
    message = str(failure.value)
    assert victim.name in message and "corrupt" in message and "sha256" in message


def test_durable_storage_keeps_only_what_retained_versions_name(spark, tmp_path):
    spark.conf.set("spark.sql.streaming.minBatchesToRetain", "3")
    try:
        run_batches(spark, tmp_path, range(14), **rocksdb_backend(tmp_path, SnapshotPolicy(max_changelogs=1,
                                                                                             min_changelog_bytes=1)))
    finally:
        spark.conf.unset("spark.sql.streaming.minBatchesToRetain")
    for key_group_dir in {p.parent for p in stored(tmp_path, "b*.json")}:
        bases = sorted(key_group_dir.glob("b*.json"))
        # a new base every other call: 14 batches wrote up to 7; the retained window keeps at most 3 of them
        assert 1 <= len(bases) <= 3, bases
    assert read_keyed_state(spark, str(tmp_path / "checkpoint"))  # the newest version is complete


def test_missing_state_files_fail_naming_the_storage_the_key_group_and_the_batch(spark, tmp_path):
    run_batches(spark, tmp_path, range(2), **rocksdb_backend(tmp_path))
    (operator_dir,) = {p.parent for p in (tmp_path / "state-storage").glob("*/*/kg-*")}
    for key_group_dir in operator_dir.glob("kg-*"):
        shutil.rmtree(key_group_dir)
    shutil.rmtree(tmp_path / "local")
    with pytest.raises(StreamingQueryException) as failure:
        run_batches(spark, tmp_path, range(2, 3), **rocksdb_backend(tmp_path))
    message = str(failure.value)
    assert "missing or unreadable" in message and str(operator_dir) in message
    # the batch number depends on how many no-data batches Spark ran for the watermark in between
    assert re.search(r"keyed_process key group \d+, batch \d+: file kg-\d+/\S+ of key group \d+", message)


def test_storage_that_refuses_writes_fails_the_batch_naming_it_and_nothing_committed_is_lost(spark, tmp_path):
    run_batches(spark, tmp_path, range(2), **rocksdb_backend(tmp_path))
    (operator_dir,) = {p.parent for p in (tmp_path / "state-storage").glob("*/*/kg-*")}
    moved = tmp_path / "moved-away"
    operator_dir.rename(moved)
    operator_dir.write_text("not a directory")  # every write below it fails
    with pytest.raises(StreamingQueryException) as failure:
        run_batches(spark, tmp_path, range(2, 3), **rocksdb_backend(tmp_path))
    assert str(operator_dir) in str(failure.value) and "checkpoint storage" in str(failure.value)
    operator_dir.unlink()
    moved.rename(operator_dir)  # storage is back: the failed batch runs again, exactly once
    run_batches(spark, tmp_path, range(3, 8), **rocksdb_backend(tmp_path))
    heap = tmp_path / "heap"
    run_batches(spark, heap, range(8), state_backend="heap")
    assert output_of(spark, tmp_path) == output_of(spark, heap)


def test_without_state_storage_a_local_query_uses_the_default_storage(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYEDSTATE_STATE_STORAGE", str(tmp_path / "default-storage"))  # read on the driver
    run_batches(spark, tmp_path, range(2), state_backend="rocksdb", state_local_dir=str(tmp_path / "local"))
    assert list((tmp_path / "default-storage").glob("*/CountListAndQuiet/kg-*/c*.log"))
    assert read_keyed_state(spark, str(tmp_path / "checkpoint"))
