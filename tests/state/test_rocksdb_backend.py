"""RocksDB-specific behaviour: storage layout, column families, options, locking, close, errors, bad input."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from keyedstate import ListStateDescriptor, MapStateDescriptor, StateTtlConfig, Time, Types, ValueStateDescriptor
from keyedstate.errors import (
    ConfigurationError,
    SerializationError,
    StateBackendError,
    StateBackendLockedError,
    StateDescriptorConflictError,
    StateTypeMismatchError,
    UnsupportedKeyTypeError,
)
from keyedstate.keygroups import key_group_of_key
from keyedstate.serialization import encode_key
from keyedstate.state.base.layout import key_group_prefix, pack_sequence
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from keyedstate.state.rocksdb.errors import translate
from keyedstate.testing import ManualClock

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def clock():
    return ManualClock(1_000_000)


@pytest.fixture
def backend(tmp_path, clock):
    created = RocksDBKeyedStateBackend(tmp_path / "db", ttl_clock=clock)
    yield created
    created.close()


def stored_prefix(key) -> bytes:
    return key_group_prefix(key_group_of_key(key, 128)) + encode_key(key)


NAMESPACE = encode_key(None)


# ---- layout ----------------------------------------------------------------------------------------------------------


def test_each_state_and_raw_column_has_its_own_column_family(backend):
    backend.get_or_create_state(ValueStateDescriptor("default", int))
    backend.get_or_create_state(ListStateDescriptor("timers", int))
    backend.raw_column("timers").put(b"k", b"v")
    families = set(backend._database.column_families)
    assert {"state:default", "state:timers", "raw:timers"} <= families
    assert backend.stored_state_names() == ["default", "timers"]
    assert backend.raw_column_names() == ["timers"]


def test_a_raw_column_family_is_created_by_its_first_write_and_reads_nothing_before(backend):
    column = backend.raw_column("processing-timers")
    assert column.get(b"k") is None and list(column.items()) == []
    column.delete(b"k")
    column.delete_range(b"a", b"z")
    assert "raw:processing-timers" not in backend._database.column_families
    column.put(b"k", b"v")
    assert backend.raw_column_names() == ["processing-timers"]
    assert column.get(b"k") == b"v" and list(column.items()) == [(b"k", b"v")]


def test_value_entries_use_the_shared_layout(backend):
    state = backend.get_or_create_state(ValueStateDescriptor("v", int))
    backend.set_current_key("alice")
    state.update(7)
    [(key, value)] = list(backend.iter_stored_records("v"))
    assert key == stored_prefix("alice") + NAMESPACE
    assert backend.registered_state("v").codec.deserialize_entry(value) == 7


def test_list_appends_write_one_key_per_element_and_never_rewrite_earlier_ones(backend):
    state = backend.get_or_create_state(ListStateDescriptor("events", int))
    backend.set_current_key("k")
    state.add(1)
    first = list(backend.iter_stored_records("events"))
    state.add_all([2, 3])
    state.add(4)
    records = list(backend.iter_stored_records("events"))
    prefix = stored_prefix("k") + NAMESPACE
    assert [key for key, _ in records] == [prefix + pack_sequence(i) for i in range(4)]
    assert records[0] == first[0]  # the first element's key and bytes are untouched
    assert state.get() == [1, 2, 3, 4]


def test_list_sequence_continues_without_the_cache(backend):
    state = backend.get_or_create_state(ListStateDescriptor("events", int))
    backend.set_current_key("k")
    state.add_all([1, 2])
    backend.registered_state("events").store._next_sequences.clear()  # as after a restart or cache eviction
    state.add(3)
    assert state.get() == [1, 2, 3]
    state.update([9])
    state.add(10)
    assert [k[-8:] for k, _ in backend.iter_stored_records("events")] == [pack_sequence(0), pack_sequence(1)]


def test_clearing_a_map_removes_only_that_keys_entries(backend):
    state = backend.get_or_create_state(MapStateDescriptor("m", str, int))
    for key in ("a", "b", "c"):
        backend.set_current_key(key)
        state.put_all({"x": 1, "y": 2})
    backend.set_current_key("b")
    state.clear()
    assert state.is_empty()
    assert sorted(backend.iter_keys("m")) == ["a", "c"]
    assert len(list(backend.iter_stored_records("m"))) == 4


def test_map_items_are_taken_for_the_key_current_when_items_was_called(backend):
    state = backend.get_or_create_state(MapStateDescriptor("m", str, int))
    backend.set_current_key("a")
    state.put("x", 1)
    backend.set_current_key("b")
    state.put("y", 2)
    backend.set_current_key("a")
    items = state.items()
    backend.set_current_key("b")
    assert list(items) == [("x", 1)]


def test_stored_records_are_ascending(backend):
    state = backend.get_or_create_state(ValueStateDescriptor("v", int))
    for key in range(500):
        backend.set_current_key(key)
        state.update(key)
    keys = [key for key, _ in backend.iter_stored_records("v")]
    assert keys == sorted(keys) and len(keys) == 500


def test_raw_column_is_ordered_and_ranges_work(backend):
    column = backend.raw_column("timers")
    column.put_many([(key_group_prefix(2) + b"b", b"2"), (key_group_prefix(1) + b"a", b"1"),
                     (key_group_prefix(3) + b"c", b"3")])
    assert [v for _, v in column.items()] == [b"1", b"2", b"3"]
    assert [v for _, v in column.items(key_group_prefix(2), key_group_prefix(3))] == [b"2"]
    column.delete_range(key_group_prefix(1), key_group_prefix(3))
    assert [v for _, v in column.items()] == [b"3"]
    column.clear()
    assert list(column.items()) == []


# ---- TTL cleanup -----------------------------------------------------------------------------------------------------


def test_cleanup_expired_state_deletes_from_rocksdb(backend, clock):
    descriptor = ValueStateDescriptor("v", int)
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(100)).build())
    state = backend.get_or_create_state(descriptor)
    for key in range(100):
        backend.set_current_key(key)
        state.update(key)
    clock.advance(99)
    assert backend.cleanup_expired_state() == 0
    clock.advance(1)  # last_access + ttl <= now
    assert backend.cleanup_expired_state() == 100
    assert list(backend.iter_stored_records("v")) == []


# ---- options -------------------------------------------------------------------------------------------------------


def test_options_are_frozen_and_validated():
    options = RocksDBOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.compression = "zstd"  # type: ignore[misc]
    with pytest.raises(ConfigurationError, match="compression"):
        RocksDBOptions(compression="brotli")
    with pytest.raises(ConfigurationError, match="block_cache_bytes"):
        RocksDBOptions(block_cache_bytes=0)
    with pytest.raises(ConfigurationError, match="lock_timeout_seconds"):
        RocksDBOptions(lock_timeout_seconds=-1)
    with pytest.raises(ConfigurationError, match="compaction_style must be one of universal, level, got 'fifo'"):
        RocksDBOptions(compaction_style="fifo")


def test_custom_options_open_a_working_database(tmp_path):
    options = RocksDBOptions(compression="zstd", bloom_bits_per_key=0, write_buffer_bytes=1 << 20,
                             block_cache_bytes=1 << 20)
    with RocksDBKeyedStateBackend(tmp_path / "db", options=options) as backend:
        state = backend.get_or_create_state(ValueStateDescriptor("v", int))
        backend.set_current_key(1)
        state.update(2)
        assert state.value() == 2


# ---- open, lock, close, reuse ----------------------------------------------------------------------------------------


def test_a_second_process_waits_for_the_lock_then_fails_naming_path_and_holder(backend, tmp_path):
    script = textwrap.dedent(f"""
        import time
        from keyedstate.errors import StateBackendLockedError
        from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
        started = time.monotonic()
        try:
            RocksDBKeyedStateBackend({str(tmp_path / "db")!r}, options=RocksDBOptions(lock_timeout_seconds=0.3))
        except StateBackendLockedError as error:
            print("waited", time.monotonic() - started)
            print(error)
            raise SystemExit(3)
        raise SystemExit(0)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 3, result.stderr
    waited = float(result.stdout.splitlines()[0].split()[1])
    assert waited >= 0.3  # it retried for the whole timeout before giving up
    assert str(tmp_path / "db") in result.stdout
    assert f"pid {os.getpid()}" in result.stdout


def test_a_second_backend_in_this_process_is_locked_out_until_the_first_closes(backend, tmp_path):
    with pytest.raises(StateBackendLockedError, match="locked"):
        RocksDBKeyedStateBackend(tmp_path / "db", options=RocksDBOptions(lock_timeout_seconds=0.1))
    backend.close()
    RocksDBKeyedStateBackend(tmp_path / "db").close()


def test_state_used_after_close_fails_clearly(backend):
    state = backend.get_or_create_state(ValueStateDescriptor("v", int))
    backend.set_current_key("k")
    backend.close()
    with pytest.raises(StateBackendError, match="closed"):
        state.value()


def test_reopening_starts_empty_unless_reuse_existing(tmp_path):
    with RocksDBKeyedStateBackend(tmp_path / "db") as backend:
        state = backend.get_or_create_state(ValueStateDescriptor("count", int))
        backend.set_current_key("k")
        state.update(5)
    with RocksDBKeyedStateBackend(tmp_path / "db", options=RocksDBOptions(reuse_existing=True)) as backend:
        with pytest.raises(StateTypeMismatchError, match="'count'.*LONG.*STRING"):
            backend.get_or_create_state(ValueStateDescriptor("count", Types.STRING()))
        state = backend.get_or_create_state(ValueStateDescriptor("count", int))
        backend.set_current_key("k")
        assert state.value() == 5
    with RocksDBKeyedStateBackend(tmp_path / "db") as backend:
        assert backend.stored_state_names() == []
        state = backend.get_or_create_state(ValueStateDescriptor("count", int))
        backend.set_current_key("k")
        assert state.value() is None


# ---- errors ----------------------------------------------------------------------------------------------------------


def test_rocksdict_errors_are_translated_in_one_place():
    locked = translate(Exception("IO error: While lock file: /x/LOCK: Resource temporarily unavailable"), "open", "/x")
    assert isinstance(locked, StateBackendLockedError) and "/x" in str(locked)
    assert type(translate(Exception("Corruption: block checksum mismatch"), "read", "/x")) is StateBackendError
    full = translate(Exception("IO error: No space left on device"), "write", "/x")
    assert "no space left on device at /x" in str(full)
    original = SerializationError("mine")
    assert translate(original, "write", "/x") is original


RUN_OUT_OF_OPEN_FILES = """
import resource, sys
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
backends = []
try:
    for number in range(64):
        backends.append(RocksDBKeyedStateBackend(sys.argv[1] + f"/db{number}"))
except Exception as error:
    print(type(error).__name__, error)
"""


def test_running_out_of_open_files_names_the_limit_and_the_ways_out(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", RUN_OUT_OF_OPEN_FILES, str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.stdout.startswith("StateBackendError "), result.stdout + result.stderr[-2000:]
    assert "soft limit 64" in result.stdout
    assert "ulimit -n" in result.stdout and "max_open_files" in result.stdout


def test_bad_input_raises_specific_errors_and_writes_nothing(backend):
    value = backend.get_or_create_state(ValueStateDescriptor("v", Types.LONG()))
    holder = backend.get_or_create_state(ValueStateDescriptor("holder"))
    entries = backend.get_or_create_state(MapStateDescriptor("m", str))  # values of any type
    families_before = set(backend._database.column_families)
    with pytest.raises(UnsupportedKeyTypeError):
        backend.set_current_key({"not": "hashable"})
    backend.set_current_key("k")
    with pytest.raises(SerializationError, match="'holder'"):
        holder.update(threading.Lock())
    with pytest.raises(StateTypeMismatchError, match="'v'.*LONG.*str"):
        value.update("one")
    with pytest.raises(UnsupportedKeyTypeError, match="'m'"):
        entries.put(["list", "key"], 1)
    with pytest.raises(SerializationError):
        entries.put_all({"a": 1, "b": threading.Lock()})  # all or nothing
    with pytest.raises(StateDescriptorConflictError, match="'v'"):
        backend.get_or_create_state(ListStateDescriptor("v", int))
    for name in ("v", "holder", "m"):
        assert list(backend.iter_stored_records(name)) == []
    assert set(backend._database.column_families) == families_before
