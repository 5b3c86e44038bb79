"""Databases a worker keeps open between calls: given up at once when another worker process asks (after the call
if one is using it), closed when unused, at most a bounded number open, and always tagged before the lock goes."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from keyedstate.spark.local_databases import TAG_FILE, LocalDatabases
from keyedstate.spark.open_databases import FILES_PER_DATABASE, OpenDatabases
from keyedstate.state.rocksdb.db import RocksDatabase
from keyedstate.state.rocksdb.options import RocksDBOptions


class FakeDatabase:
    """Stands in for a detached RocksDatabase: its close() and the SST files it holds open."""

    def __init__(self, path: str, sst_files: int = 0) -> None:
        self.path = path
        self.sst_files = sst_files
        self.closed_at: float | None = None

    def close(self) -> None:
        self.closed_at = time.monotonic()

    def live_sst_files(self) -> dict[str, int]:
        return {os.path.join(self.path, f"{number:06d}.sst"): 1 for number in range(self.sst_files)}


def kept_database(local: LocalDatabases, open_databases: OpenDatabases, key_group: int,
                  tag: str, sst_files: int = 0) -> tuple[str, FakeDatabase]:
    path = local.path("query", "Count", key_group)
    os.makedirs(path)
    database = FakeDatabase(path, sst_files)
    open_databases.keep(path, database, tag, local.acquire(path))
    return path, database


def asked_for_the_database_in_use(open_databases: OpenDatabases) -> bool:
    """Whether another process's request for the database the current call uses has arrived (read from the private
    flag that makes the end of the call give the database up: no public behaviour shows it before then)."""
    return open_databases._release_after_use


def take_in_another_process(root: str, path: str, timeout_s: float = 30.0) -> subprocess.Popen:
    """Another worker process taking the database's lock (as a call of the key group there would), then printing
    the tag it finds."""
    code = textwrap.dedent(f"""
        from keyedstate.spark.local_databases import LocalDatabases
        local = LocalDatabases({root!r}, lock_timeout_seconds={timeout_s})
        lock = local.acquire({path!r})
        print(local.read_tag({path!r}), flush=True)
        local.release(lock)
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=os.getcwd())


@pytest.fixture
def local(tmp_path) -> LocalDatabases:
    return LocalDatabases(str(tmp_path))


def test_a_kept_database_is_closed_and_tagged_when_another_process_asks_for_it(local):
    open_databases = OpenDatabases(local, keep_seconds=3_600)  # never closed for being unused during the test
    path, database = kept_database(local, open_databases, 7, "tag-7")
    assert not os.path.exists(os.path.join(path, TAG_FILE))  # trusted only in memory while kept

    other = take_in_another_process(local.root, path)
    out, err = other.communicate(timeout=60)
    assert other.returncode == 0, err
    assert out.strip() == "tag-7"  # the tag was on disk before the lock was released
    assert database.closed_at is not None and len(open_databases) == 0
    assert open_databases.take_first([path]) == (None, None)  # this process no longer believes it holds the database


def test_a_request_for_a_database_in_use_is_served_when_the_call_ends(local):
    open_databases = OpenDatabases(local, keep_seconds=3_600)
    path, database = kept_database(local, open_databases, 8, "tag-8")
    _, kept = open_databases.take_first([path])  # a call of this process uses it now
    assert kept is not None and kept.database is database

    other = take_in_another_process(local.root, path)
    deadline = time.monotonic() + 30
    while not asked_for_the_database_in_use(open_databases) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert other.poll() is None  # still waiting: the database is in use here
    assert open_databases.keep(path, kept.database, "tag-9", kept.lock) is False  # the call must not keep it
    local.write_tag(path, "tag-9")  # what the store does when it closes a database after a call
    local.release(kept.lock)
    out, err = other.communicate(timeout=60)
    assert other.returncode == 0, err
    assert out.strip() == "tag-9"


def test_without_requests_a_database_stays_kept_for_the_next_call(local):
    open_databases = OpenDatabases(local, keep_seconds=3_600)
    path, database = kept_database(local, open_databases, 9, "tag-9")
    _, kept = open_databases.take_first([path])
    assert kept is not None and kept.tag == "tag-9" and database.closed_at is None
    assert open_databases.keep(path, kept.database, "tag-10", kept.lock) is True
    open_databases.close_all()
    assert local.read_tag(path) == "tag-10" and database.closed_at is not None


def test_databases_unused_for_the_keep_time_are_closed_and_tagged(local):
    open_databases = OpenDatabases(local, keep_seconds=20)
    path, database = kept_database(local, open_databases, 10, "tag-a")
    assert open_databases.close_unused(now=time.monotonic() + 5) == 0 and database.closed_at is None
    assert open_databases.close_unused(now=time.monotonic() + 21) == 1
    assert database.closed_at is not None and local.read_tag(path) == "tag-a"
    local.release(local.acquire(path))  # the lock was released with it


def test_the_least_recently_used_database_is_closed_past_the_bound(local):
    open_databases = OpenDatabases(local, keep_seconds=3_600, max_kept=2)
    paths_and_databases = [kept_database(local, open_databases, group, f"tag-{group}") for group in (1, 2, 3)]
    (oldest, first), (_, second), (_, third) = paths_and_databases
    assert len(open_databases) == 2
    assert first.closed_at is not None and second.closed_at is None and third.closed_at is None
    assert local.read_tag(oldest) == "tag-1"
    open_databases.close_all()


def test_the_kept_databases_hold_no_more_open_files_than_the_budget(local, caplog):
    """Every SST file of an open database stays open: past the budget (by default half the process's limit of open
    files) the least recently used databases are closed and tagged, as past the count bound, and the log says once
    why the worker keeps fewer."""
    open_databases = OpenDatabases(local, keep_seconds=3_600, max_open_files=3 * (4 + FILES_PER_DATABASE))
    with caplog.at_level(logging.WARNING, logger="keyedstate.spark.rocksdb"):
        kept = [kept_database(local, open_databases, group, f"tag-{group}", sst_files=4) for group in range(60, 65)]
    warnings = [record.getMessage() for record in caplog.records if "limit of open files" in record.getMessage()]
    assert len(warnings) == 1 and "ulimit -n" in warnings[0]
    assert len(open_databases) == 3
    assert [database.closed_at is not None for _, database in kept] == [True, True, False, False, False]
    assert [local.read_tag(path) for path, _ in kept[:2]] == ["tag-60", "tag-61"]
    path, database = kept_database(local, open_databases, 65, "tag-65", sst_files=100)  # alone over the budget
    assert len(open_databases) == 1 and database.closed_at is None  # kept: a call's own database stays


def test_the_budget_of_open_files_counts_the_databases_kept_below_every_local_directory(tmp_path, monkeypatch):
    """Two queries with their own ``state_local_dir`` in one worker keep their databases apart, but their files
    count against one limit of open files: the second directory's databases leave the first less room."""
    import keyedstate.spark.open_databases as module

    monkeypatch.setattr(module, "_SHARED", {})
    first_local, second_local = LocalDatabases(str(tmp_path / "first")), LocalDatabases(str(tmp_path / "second"))
    first, second = module.open_databases_of(first_local), module.open_databases_of(second_local)
    budget = 4 * (4 + FILES_PER_DATABASE)
    first.max_open_files = second.max_open_files = budget
    first.keep_seconds = second.keep_seconds = 3_600
    try:
        in_second = [kept_database(second_local, second, group, f"tag-{group}", sst_files=4) for group in (1, 2)]
        in_first = [kept_database(first_local, first, group, f"tag-{group}", sst_files=4) for group in (1, 2, 3)]
        assert second.files_kept() == 2 * (4 + FILES_PER_DATABASE)
        assert len(first) == 2 and first.files_kept() + second.files_kept() == budget
        assert [database.closed_at is not None for _, database in in_first] == [True, False, False]
        assert all(database.closed_at is None for _, database in in_second)
    finally:
        first.close_all()
        second.close_all()


def test_the_default_budget_is_half_the_limit_of_open_files(local):
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    expected = None if soft == resource.RLIM_INFINITY else soft // 2
    assert OpenDatabases(local).max_open_files == expected


def test_a_database_whose_directory_vanished_is_released_without_a_tag(local):
    open_databases = OpenDatabases(local, keep_seconds=3_600)
    path, database = kept_database(local, open_databases, 11, "tag-11")

    def failing_close() -> None:
        raise OSError("IO error: No such file or directory")

    database.close = failing_close  # type: ignore[method-assign]
    open_databases.close_all()
    assert local.read_tag(path) is None  # never a tag on files the close could not flush
    local.release(local.acquire(path))


def test_requests_from_several_processes_at_once_are_all_served(local):
    open_databases = OpenDatabases(local, keep_seconds=3_600)
    kept = [kept_database(local, open_databases, group, f"tag-{group}") for group in range(20, 26)]
    others = [take_in_another_process(local.root, path) for path, _ in kept]
    results = [other.communicate(timeout=60) for other in others]
    assert [out.strip() for out, _ in results] == [f"tag-{group}" for group in range(20, 26)]
    assert all(database.closed_at is not None for _, database in kept) and len(open_databases) == 0


def test_the_listener_survives_garbage_on_its_channel(local):
    open_databases = OpenDatabases(local, keep_seconds=3_600)
    path, database = kept_database(local, open_databases, 30, "tag-30")
    channel = os.open(local.request_channel(os.getpid()), os.O_WRONLY | os.O_NONBLOCK)
    os.write(channel, b"\n/no/such/database\n\xff\xfe\n")
    os.close(channel)
    other = take_in_another_process(local.root, path)
    out, err = other.communicate(timeout=60)
    assert out.strip() == "tag-30", err
    assert threading.active_count() >= 2  # the listener thread is still there


@pytest.fixture
def over_a_thousand_descriptors():
    """This process holds descriptors past 1024, select()'s limit, as a worker does that keeps a query's databases
    open (every SST file stays open) when a second query's databases start their listener."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the hard limit of open files is {hard}: no process here can hold a descriptor past 1024")
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) >= 1024
        yield
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_requests_are_served_when_the_channel_is_opened_past_a_thousand_descriptors(local,
                                                                                   over_a_thousand_descriptors):
    open_databases = OpenDatabases(local, keep_seconds=3_600)
    path, database = kept_database(local, open_databases, 35, "tag-35")
    other = take_in_another_process(local.root, path)
    out, err = other.communicate(timeout=60)
    assert other.returncode == 0, err
    assert out.strip() == "tag-35"
    assert database.closed_at is not None and len(open_databases) == 0


def test_without_a_request_channel_nothing_is_kept_and_the_caller_closes_as_before(local):
    open(os.path.join(local.root, "workers"), "w").close()  # a file where the FIFOs' directory belongs
    open_databases = OpenDatabases(local, keep_seconds=3_600)
    path = local.path("query", "Count", 40)
    os.makedirs(path)
    lock = local.acquire(path)
    assert open_databases.keep(path, FakeDatabase(path), "tag-40", lock) is False
    assert len(open_databases) == 0
    local.release(lock)


def _files(path: str) -> dict[str, tuple[int, int]]:
    return {name: (os.stat(os.path.join(path, name)).st_size, os.stat(os.path.join(path, name)).st_mtime_ns)
            for name in sorted(os.listdir(path))}


def test_a_kept_database_whose_directory_another_process_took_over_writes_nothing_into_it(local):
    """Deleting the local databases with their lock files (a disk cleanup) lets another process lock and rebuild
    the path while this one still keeps its database open: closing that one must not flush SSTs into the new
    directory (RocksDB reuses file numbers: "Mismatch in unique ID"), purge its files or write a tag there."""
    open_databases = OpenDatabases(local, keep_seconds=3_600)
    path = local.path("query", "Count", 50)
    os.makedirs(path)
    lock = local.acquire(path)
    database = RocksDatabase(local.handle(path), RocksDBOptions(reuse_existing=True), families=["state:count"])
    for index in range(100):
        database.column_family("state:count").put(b"old-%d" % index, b"only in the memtable")
    assert open_databases.keep(path, database, "tag-old", lock)
    shutil.rmtree(os.path.join(local.root, "query"))  # the database, its lock and its handle's target

    code = textwrap.dedent(f"""
        import os
        from keyedstate.spark.local_databases import LocalDatabases
        from keyedstate.state.rocksdb.db import RocksDatabase
        from keyedstate.state.rocksdb.options import RocksDBOptions
        local, path = LocalDatabases({local.root!r}, lock_timeout_seconds=30), {path!r}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock = local.acquire(path)
        database = RocksDatabase(path, RocksDBOptions(reuse_existing=True), families=["state:count"])
        if os.environ.get("READ") != "1":
            for index in range(100):
                database.column_family("state:count").put(b"new-%d" % index, b"committed")
            database.close()
            local.write_tag(path, "tag-new")
        else:
            family = database.column_family("state:count")
            print(sorted(key.decode() for key in family.keys())[:1], len(list(family.keys())), flush=True)
            database.close()
        local.release(lock)
    """)
    taken = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert taken.returncode == 0, taken.stderr
    before = _files(path)

    open_databases.close_all()  # the kept database goes (as when unused, evicted or asked for)
    assert local.read_tag(path) == "tag-new" and _files(path) == before
    read = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "READ": "1"})
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["['new-0']", "100"]  # the new owner's state, whole, and nothing of ours
    assert os.listdir(os.path.join(local.root, "handles", str(os.getpid()))) == []
