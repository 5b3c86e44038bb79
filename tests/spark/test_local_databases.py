"""Executor-local databases of RocksDB mode: one user at a time, and removed once no key group has used them for a
while (never while in use)."""

from __future__ import annotations

import os
import time

import pytest

from keyedstate.errors import StateBackendLockedError
from keyedstate.spark.local_databases import TAG_FILE, LocalDatabases
from keyedstate.state.key_groups.timer_counts import read_timer_counts, write_timer_counts


def database(local: LocalDatabases, key_group: int, age_seconds: float) -> str:
    path = local.path("query", "Count", key_group)
    os.makedirs(path)
    local.write_tag(path, f"tag{key_group}")
    local.release(local.acquire(path))  # every database has a lock file, touched by each taker
    then = time.time() - age_seconds
    for used in (os.path.join(path, TAG_FILE), path + ".lock"):
        os.utime(used, (then, then))
    return path


def test_databases_unused_for_longer_than_the_idle_time_are_removed(tmp_path):
    local = LocalDatabases(str(tmp_path))
    old, recent = database(local, 1, 3_600), database(local, 2, 10)
    assert local.sweep(idle_seconds=900, force=True) == [old]
    assert not os.path.exists(old) and local.read_tag(recent) == "tag2"


def test_a_database_whose_process_died_while_it_had_it_open_ages_by_its_lock_file(tmp_path):
    local = LocalDatabases(str(tmp_path))
    untagged = database(local, 3, 3_600)
    local.remove_tag(untagged)  # the tag is removed while a process has the database open
    assert local.sweep(idle_seconds=900, force=True) == [untagged]
    assert not os.path.exists(untagged) and not os.path.exists(untagged + ".lock")


def test_a_database_in_use_is_neither_removed_nor_opened_twice(tmp_path):
    local, other_process = LocalDatabases(str(tmp_path)), LocalDatabases(str(tmp_path), lock_timeout_seconds=0.2)
    path = database(local, 1, 3_600)
    lock = local.acquire(path)
    try:
        assert other_process.sweep(idle_seconds=900, force=True) == []
        with pytest.raises(StateBackendLockedError, match="still in use by another worker process"):
            other_process.acquire(path)
    finally:
        local.release(lock)
    other_process.release(other_process.acquire(path))  # free again
    assert os.path.exists(path)


def test_the_cached_changelogs_and_timer_counts_of_a_key_group_go_with_its_last_database(tmp_path):
    local = LocalDatabases(str(tmp_path))
    database(local, 1, 3_600)
    database(local, 2, 10)
    for key_group in (1, 2):
        os.makedirs(local.changelogs_path("query", "Count", key_group))
        with open(os.path.join(local.changelogs_path("query", "Count", key_group), "c1-t.log"), "wb") as file:
            file.write(b"changes")
        write_timer_counts(local.timer_counts_path("query", "Count", key_group), "t", (3, 0))
    assert local.sweep(idle_seconds=900, force=True) == [local.path("query", "Count", 1)]
    assert not os.path.exists(local.changelogs_path("query", "Count", 1))
    assert not os.path.exists(local.timer_counts_path("query", "Count", 1))
    assert os.listdir(local.changelogs_path("query", "Count", 2)) == ["c1-t.log"]  # its database may catch up
    assert read_timer_counts(local.timer_counts_path("query", "Count", 2), "t") == (3, 0)


def test_idle_databases_of_processes_that_are_gone_are_removed(tmp_path):
    gone = tmp_path / "idle" / "999999999-abcd"
    gone.mkdir(parents=True)
    first, second = LocalDatabases(str(tmp_path)).idle_path(), LocalDatabases(str(tmp_path)).idle_path()
    assert not gone.exists() and first != second  # two queries in one worker never share one
    assert os.path.basename(first).startswith(f"{os.getpid()}-")


RUN_OUT_OF_OPEN_FILES = """
import os, resource, sys
from keyedstate.spark.local_databases import LocalDatabases
local = LocalDatabases(sys.argv[1])
path = local.path("query", "Count", 7)
os.makedirs(path)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    local.acquire(path)
except Exception as error:
    print(type(error).__name__, error)
"""


def test_a_lock_that_cannot_be_taken_for_lack_of_open_files_names_the_limit_and_the_ways_out(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", RUN_OUT_OF_OPEN_FILES, str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.stdout.startswith("StateBackendError cannot lock the local state database"), (
        result.stdout + result.stderr[-2000:])
    assert "soft limit 64" in result.stdout and "ulimit -n" in result.stdout


def test_a_call_that_fails_to_lock_a_later_copy_releases_the_copy_it_already_locked(tmp_path):
    """Looking for the best copy, a call locks one copy and tries the next; when that fails (here: its lock file
    is a directory), the first lock is released too. Held by a worker that goes on running other key groups, it
    would keep that copy from every other worker until the worker exits."""
    from keyedstate.errors import StateBackendError
    from keyedstate.spark.rocksdb_mode import SparkLocalCopies
    from keyedstate.state.rocksdb.options import RocksDBOptions

    copies = SparkLocalCopies(8, state_storage=str(tmp_path / "storage"), storage_options=None,
                              local_dir=str(tmp_path / "local"), uid="Count", options=RocksDBOptions(),
                              keep_open=False, scope=("query", str(tmp_path / "storage" / "query")))
    first, second = copies.local.copies("query", "Count", 3)[:2]
    os.makedirs(first)
    copies.local.release(copies.local.acquire(first))  # the first copy exists, unlocked, at no committed version
    os.makedirs(second + ".lock")
    versions, _ = copies.versions(3, None, None)
    with pytest.raises(StateBackendError, match="cannot lock the local state database"):
        copies.acquire(3, None, versions)
    lock = LocalDatabases.try_acquire(first)  # a lock of this process would conflict too: flock is per open file
    assert lock is not None
    LocalDatabases.release(lock)
