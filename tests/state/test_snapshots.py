"""Snapshots and restore on both backends: round trips, incremental uploads, retention, corruption fallback,
rescaling, TTL cleanup at snapshot time and descriptor checks on restore."""

from __future__ import annotations

import logging
import os

import pytest

from keyedstate import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    Time,
    ValueStateDescriptor,
)
from keyedstate.checkpoint import CheckpointStorage, FileEntry, restore_latest
from keyedstate.errors import NoRestorableSnapshotError, StateTypeMismatchError
from keyedstate.keygroups import KeyGroupRange, key_group_for_key, key_group_range_for_partition
from keyedstate.serialization import encode_key
from keyedstate.state.base.layout import key_group_of, key_group_prefix
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend
from keyedstate.testing import ManualClock

BACKENDS = ["heap", "rocksdb"]
TTL_MS = 60_000
MAX_PARALLELISM = 128


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]


def ttl_config(**changes):
    builder = StateTtlConfig.new_builder(Time.milliseconds(TTL_MS))
    if changes.get("no_background"):
        builder = builder.disable_cleanup_in_background()
    return builder.build()


def descriptors(with_ttl: bool) -> dict:
    suffix = "-ttl" if with_ttl else ""
    made = {
        "value": ValueStateDescriptor("value" + suffix, int),
        "list": ListStateDescriptor("list" + suffix, int),
        "map": MapStateDescriptor("map" + suffix, str, int),
        "reducing": ReducingStateDescriptor("reducing" + suffix, lambda a, b: a + b, int),
        "aggregating": AggregatingStateDescriptor("aggregating" + suffix, Average(), tuple),
    }
    if with_ttl:
        for descriptor in made.values():
            descriptor.enable_time_to_live(ttl_config())
    return made


class Factory:
    """Creates backends of either kind in tmp_path, closes them at the end."""

    def __init__(self, tmp_path, clock) -> None:
        self.tmp_path = tmp_path
        self.clock = clock
        self.created = []

    def __call__(self, kind: str, storage, key_group_range=None, **kwargs):
        if kind == "heap":
            backend = HeapKeyedStateBackend(max_parallelism=MAX_PARALLELISM, key_group_range=key_group_range,
                                            ttl_clock=self.clock, checkpoint_storage=storage, **kwargs)
        else:
            backend = RocksDBKeyedStateBackend(self.tmp_path / f"db-{len(self.created)}", max_parallelism=MAX_PARALLELISM,
                                               key_group_range=key_group_range, ttl_clock=self.clock,
                                               checkpoint_storage=storage, **kwargs)
        self.created.append(backend)
        return backend

    def close(self) -> None:
        for backend in self.created:
            backend.close()


@pytest.fixture
def clock():
    return ManualClock(1_700_000_000_000)


@pytest.fixture
def make(tmp_path, clock):
    factory = Factory(tmp_path, clock)
    yield factory
    factory.close()


@pytest.fixture
def storage(tmp_path):
    return CheckpointStorage(tmp_path / "checkpoints")


def register_all(backend) -> dict:
    states = {}
    for with_ttl in (False, True):
        for kind, descriptor in descriptors(with_ttl).items():
            states[(kind, with_ttl)] = backend.get_or_create_state(descriptor)
    return states


def write_key(backend, states, key, number) -> None:
    backend.set_current_key(key)
    for with_ttl in (False, True):
        states[("value", with_ttl)].update(number)
        states[("list", with_ttl)].add_all([number, number + 1])
        states[("map", with_ttl)].put_all({"a": number, "b": -number})
        states[("reducing", with_ttl)].add(number)
        states[("aggregating", with_ttl)].add(number)


def check_key(backend, states, key, number) -> None:
    backend.set_current_key(key)
    for with_ttl in (False, True):
        assert states[("value", with_ttl)].value() == number
        assert states[("list", with_ttl)].get() == [number, number + 1]
        assert dict(states[("map", with_ttl)].items()) == {"a": number, "b": -number}
        assert states[("reducing", with_ttl)].get() == number
        assert states[("aggregating", with_ttl)].get() == number


def all_records(backend) -> dict:
    names = [d.name for with_ttl in (False, True) for d in descriptors(with_ttl).values()]
    return {name: list(backend.iter_stored_records(name)) for name in names}


def key_of(index: int) -> str:
    return f"user-{index}"


# ---- round trips ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", BACKENDS)
def test_round_trip_of_100000_keys_across_every_state_type(kind, make, storage):
    source = make(kind, storage)
    states = register_all(source)
    for index in range(100_000):
        write_key(source, states, key_of(index), index)
    expected = all_records(source)
    assert len(expected["value"]) == len(expected["value-ttl"]) == 100_000
    assert len(expected["list"]) == len(expected["map-ttl"]) == 200_000
    manifest = source.snapshot(1)
    assert manifest.backend_kind == kind and {s.name for s in manifest.states} == set(expected)

    target = make(kind, storage)
    assert [m.checkpoint_id for m in restore_latest(target)] == [1]
    restored_states = register_all(target)
    assert all_records(target) == expected  # byte-identical entries, TTL timestamps included
    for index in range(0, 100_000, 101):
        check_key(target, restored_states, key_of(index), index)
    target.set_current_key("never-written")
    assert restored_states[("value", False)].value() is None


@pytest.mark.parametrize("source_kind, target_kind", [("heap", "rocksdb"), ("rocksdb", "heap")])
def test_a_snapshot_of_one_backend_restores_into_the_other(source_kind, target_kind, make, storage):
    source = make(source_kind, storage)
    states = register_all(source)
    timers = source.raw_column("timers")
    for index in range(3_000):
        write_key(source, states, key_of(index), index)
        timers.put(source._current_prefix + index.to_bytes(8, "big"), b"")
    expected = all_records(source)
    expected_timers = list(timers.items())
    source.snapshot(7)

    target = make(target_kind, storage)
    restore_latest(target)
    # Unregistered states and the raw column are kept as restored, and exported again unchanged.
    assert sorted(m.name for m in target.state_metadata()) == sorted(expected)
    restored_states = register_all(target)
    assert all_records(target) == expected
    assert list(target.raw_column("timers").items()) == expected_timers
    for index in range(0, 3_000, 7):
        check_key(target, restored_states, key_of(index), index)


@pytest.mark.parametrize("kind", BACKENDS)
def test_states_restored_but_not_registered_survive_the_next_snapshot(kind, make, storage):
    source = make(kind, storage)
    states = register_all(source)
    write_key(source, states, "k", 5)
    source.snapshot(1)
    middle = make(kind, storage)
    restore_latest(middle)
    middle.snapshot(2)  # registers nothing
    target = make(kind, storage)
    assert [m.checkpoint_id for m in restore_latest(target)] == [2]
    check_key(target, register_all(target), "k", 5)


@pytest.mark.parametrize("kind", BACKENDS)
def test_pre_snapshot_hooks_run_first_and_their_raw_column_is_in_the_snapshot(kind, make, storage):
    source = make(kind, storage)
    column = source.raw_column("timers")
    source.add_pre_snapshot_hook(lambda: column.put(key_group_prefix(3) + b"flushed", b"1"))
    source.snapshot(1)
    target = make(kind, storage)
    restore_latest(target)
    assert list(target.raw_column("timers").items()) == [(key_group_prefix(3) + b"flushed", b"1")]


def test_empty_storage_restores_nothing(make, storage):
    assert restore_latest(make("rocksdb", storage)) is None
    assert restore_latest(make("heap", storage)) is None


# ---- incremental snapshots -----------------------------------------------------------------------------------------


def test_second_rocksdb_snapshot_after_changing_one_percent_uploads_under_ten_percent(make, storage):
    backend = make("rocksdb", storage)
    value = backend.get_or_create_state(ValueStateDescriptor("value", str))
    items = backend.get_or_create_state(ListStateDescriptor("items", int))
    for index in range(100_000):
        backend.set_current_key(index)
        value.update(f"payload-{index}-" + "x" * 40)
        items.add(index)
    first = backend.snapshot(1)
    for index in range(0, 100_000, 100):  # 1% of the keys
        backend.set_current_key(index)
        value.update("changed")
        items.add(-1)
    second = backend.snapshot(2)

    assert first.uploaded_bytes == first.total_bytes > 1_000_000
    assert second.uploaded_bytes < 0.10 * first.uploaded_bytes
    reused = {e.path for e in first.files if e.shared} & {e.path for e in second.files if e.shared}
    assert reused and sum(e.size for e in second.files if e.path in reused) > 0.9 * first.total_bytes * 0.9

    restored = make("rocksdb", storage)
    restore_latest(restored)
    value = restored.get_or_create_state(ValueStateDescriptor("value", str))
    items = restored.get_or_create_state(ListStateDescriptor("items", int))
    restored.set_current_key(100)
    assert value.value() == "changed" and items.get() == [100, -1]
    restored.set_current_key(101)
    assert value.value().startswith("payload-101-") and items.get() == [101]


def test_a_restored_database_uploads_none_of_its_files_again(make, storage):
    backend = make("rocksdb", storage)
    value = backend.get_or_create_state(ValueStateDescriptor("value", int))
    for index in range(20_000):
        backend.set_current_key(index)
        value.update(index)
    first = backend.snapshot(1)
    restored = make("rocksdb", storage)
    restore_latest(restored)
    second = restored.snapshot(2)
    first_shared = {e.identity for e in first.files if e.shared}
    assert first_shared and first_shared <= {e.identity for e in second.files if e.shared}
    assert second.uploaded_bytes < 0.2 * first.uploaded_bytes


def test_an_sst_matching_a_stored_one_by_name_and_size_but_not_checksum_is_uploaded(make, storage):
    backend = make("rocksdb", storage)
    value = backend.get_or_create_state(ValueStateDescriptor("value", int))
    for index in range(5_000):
        backend.set_current_key(index)
        value.update(index)
    first = backend.snapshot(1)
    # Pretend the stored SSTs of snapshot 1 have other content (as after a restore that reused file numbers).
    first.files = [FileEntry(e.path, e.name, e.size, "0" * 64, e.shared) if e.shared else e for e in first.files]
    storage.write_manifest(first)
    second = backend.snapshot(2)
    sst_bytes = sum(e.size for e in second.files if e.shared)
    assert sst_bytes > 0 and second.uploaded_bytes >= sst_bytes


# ---- retention -----------------------------------------------------------------------------------------------------


def _compact(backend) -> None:
    for family in backend._database.column_families.values():
        family.compact_range(None, None)


def test_retention_deletes_what_only_dropped_snapshots_used_and_keeps_what_retained_ones_need(make, tmp_path):
    storage = CheckpointStorage(tmp_path / "checkpoints", retained_checkpoints=2)
    backend = make("rocksdb", storage)
    value = backend.get_or_create_state(ValueStateDescriptor("value", int))
    manifests = {}
    for checkpoint_id in range(1, 5):
        for index in range(checkpoint_id * 1_000):
            backend.set_current_key(index)
            value.update(index * checkpoint_id)
        if checkpoint_id == 3:
            _compact(backend)  # rewrites SSTs: files of snapshots 1-2 are used by them alone
        manifests[checkpoint_id] = backend.snapshot(checkpoint_id)

    on_disk = set(storage.list_files())
    retained = {e.path for cid in (3, 4) for e in manifests[cid].files}
    dropped_only = {e.path for cid in (1, 2) for e in manifests[cid].files} - retained
    assert retained <= on_disk  # never a file a retained snapshot needs
    assert dropped_only and not (dropped_only & on_disk)  # everything only dropped snapshots used is gone
    assert storage.list_checkpoint_ids() == [3, 4]
    assert not [p for p in on_disk if p.startswith(("chk-1/", "chk-2/"))]
    # a file the dropped snapshot 2 shared with snapshot 4 is still there
    shared_2_and_4 = {e.path for e in manifests[2].files} & {e.path for e in manifests[4].files}
    assert shared_2_and_4 <= on_disk
    # and what is left restores
    restored = make("rocksdb", storage)
    assert [m.checkpoint_id for m in restore_latest(restored)] == [4]
    value = restored.get_or_create_state(ValueStateDescriptor("value", int))
    restored.set_current_key(3_999)
    assert value.value() == 3_999 * 4


def test_heap_retention_keeps_the_newest_snapshots(make, tmp_path):
    storage = CheckpointStorage(tmp_path / "checkpoints", retained_checkpoints=3)
    backend = make("heap", storage)
    value = backend.get_or_create_state(ValueStateDescriptor("value", int))
    for checkpoint_id in range(1, 6):
        backend.set_current_key(checkpoint_id)
        value.update(checkpoint_id)
        backend.snapshot(checkpoint_id)
    assert storage.list_checkpoint_ids() == [3, 4, 5]
    assert all(p.startswith(("chk-3/", "chk-4/", "chk-5/")) for p in storage.list_files())


# ---- corruption and fallback ---------------------------------------------------------------------------------------


def _two_snapshots(make, storage, kind):
    backend = make(kind, storage)
    value = backend.get_or_create_state(ValueStateDescriptor("value", int))
    for checkpoint_id in (1, 2):
        for index in range(2_000):
            backend.set_current_key(index)
            value.update(index + checkpoint_id * 1_000_000)
        manifest = backend.snapshot(checkpoint_id)
    return manifest


def _file_only_in_newest(storage, manifest):
    older = {e.path for e in storage.load_manifest(1, manifest.scope).files}
    candidates = [e for e in manifest.files if e.path not in older and e.size > 100]
    return max(candidates, key=lambda e: e.size)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("damage", ["flip", "delete"])
def test_a_corrupt_file_in_the_newest_snapshot_falls_back_to_the_previous_one(kind, damage, make, storage, caplog):
    newest = _two_snapshots(make, storage, kind)
    victim = _file_only_in_newest(storage, newest)
    path = os.path.join(storage.root, victim.path)
    if damage == "flip":
        with open(path, "r+b") as file:
            file.seek(victim.size // 2)
            byte = file.read(1)
            file.seek(victim.size // 2)
            file.write(bytes([byte[0] ^ 0xFF]))
    else:
        os.remove(path)

    target = make(kind, storage)
    with caplog.at_level(logging.WARNING, logger="keyedstate"):
        used = restore_latest(target)
    assert [m.checkpoint_id for m in used] == [1]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(victim.path in message and "checkpoint 2" in message for message in warnings), warnings
    value = target.get_or_create_state(ValueStateDescriptor("value", int))
    target.set_current_key(5)
    assert value.value() == 1_000_005


def test_no_restorable_snapshot_lists_what_was_tried(make, storage):
    newest = _two_snapshots(make, storage, "heap")
    for checkpoint_id in (1, 2):
        for entry in storage.load_manifest(checkpoint_id, newest.scope).files:
            os.remove(os.path.join(storage.root, entry.path))
    with pytest.raises(NoRestorableSnapshotError, match="checkpoint 2.*checkpoint 1"):
        restore_latest(make("heap", storage))


def test_a_corrupt_snapshot_leaves_the_rocksdb_backend_untouched_until_a_good_one_loads(make, storage):
    newest = _two_snapshots(make, storage, "rocksdb")
    for checkpoint_id in (1, 2):
        manifest = storage.load_manifest(checkpoint_id, newest.scope)
        victim = os.path.join(storage.root, max(manifest.files, key=lambda e: e.size).path)
        if os.path.exists(victim):  # the two snapshots may share their largest file
            os.remove(victim)
    target = make("rocksdb", storage)
    value = target.get_or_create_state(ValueStateDescriptor("value", int))
    target.set_current_key("local")
    value.update(1)
    with pytest.raises(NoRestorableSnapshotError):
        restore_latest(target)
    assert value.value() == 1


# ---- rescaling -----------------------------------------------------------------------------------------------------


def _write_partitioned(make, storage, kind, partitions, keys):
    for partition in range(partitions):
        owned = key_group_range_for_partition(partition, partitions, MAX_PARALLELISM)
        backend = make(kind, storage, key_group_range=owned)
        states = register_all(backend)
        timers = backend.raw_column("timers")
        for index in keys:
            if key_group_for_key(key_of(index), MAX_PARALLELISM) in owned:
                write_key(backend, states, key_of(index), index)
                timers.put(backend._current_prefix + index.to_bytes(8, "big"), b"t")
        backend.snapshot(1)


@pytest.mark.parametrize("source_kind, target_kind", [("heap", "heap"), ("rocksdb", "rocksdb"),
                                                      ("rocksdb", "heap"), ("heap", "rocksdb")])
@pytest.mark.parametrize("new_partitions", [3, 1])
def test_rescaling_hands_every_key_to_exactly_its_owner_with_its_full_state(source_kind, target_kind,
                                                                              new_partitions, make, storage):
    keys = range(4_000)
    _write_partitioned(make, storage, source_kind, 2, keys)
    seen: list[str] = []
    timer_keys: list[bytes] = []
    for partition in range(new_partitions):
        owned = key_group_range_for_partition(partition, new_partitions, MAX_PARALLELISM)
        backend = make(target_kind, storage, key_group_range=owned)
        used = restore_latest(backend)
        assert {m.scope for m in used} <= {"kg-0-63", "kg-64-127"}
        states = register_all(backend)
        for name in ("value", "list-ttl", "map", "reducing-ttl", "aggregating"):
            keys_here = list(backend.iter_keys(name))
            assert all(key_group_for_key(k, MAX_PARALLELISM) in owned for k in keys_here)
            if name == "value":
                seen.extend(keys_here)
        for record in all_records(backend).values():
            assert all(key_group_of(k) in owned for k, _ in record)  # no unowned key group was loaded
        for key in backend.iter_keys("value"):
            check_key(backend, states, key, int(key.split("-")[1]))
        timers = list(backend.raw_column("timers").items())
        assert all(key_group_of(k) in owned for k, _ in timers)
        timer_keys.extend(k for k, _ in timers)
    assert sorted(seen) == sorted(key_of(i) for i in keys)  # every key exactly once
    expected_timers = sorted(key_group_prefix(key_group_for_key(key_of(i), MAX_PARALLELISM)) + encode_key(key_of(i))
                             + i.to_bytes(8, "big") for i in keys)
    assert sorted(timer_keys) == expected_timers


def test_restore_needs_snapshots_covering_every_owned_key_group(make, storage):
    backend = make("heap", storage, key_group_range=KeyGroupRange(0, 63))
    backend.snapshot(1)
    with pytest.raises(NoRestorableSnapshotError, match="do not cover key groups 0..127"):
        restore_latest(make("heap", storage))


# ---- TTL cleanup at snapshot time ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_expired_state_never_read_again_is_gone_from_storage_after_a_snapshot(kind, make, storage, clock):
    backend = make(kind, storage)
    states = {with_ttl: register_all(backend) for with_ttl in (True,)}[True]
    kept = ValueStateDescriptor("no-background-cleanup", int)
    kept.enable_time_to_live(ttl_config(no_background=True))
    kept_state = backend.get_or_create_state(kept)
    for index in range(500):
        write_key(backend, states, key_of(index), index)
        kept_state.update(index)
    clock.advance(TTL_MS)  # every entry now has last_access + ttl <= now
    backend.set_current_key(key_of(0))
    states[("value", True)].update(0)  # one fresh entry
    before = sum(1 for _ in backend.iter_stored_records("list-ttl"))
    assert before == 1_000
    backend.snapshot(1)

    assert [len(list(backend.iter_stored_records(n))) for n in ("value-ttl", "list-ttl", "map-ttl", "reducing-ttl",
                                                                "aggregating-ttl")] == [1, 0, 0, 0, 0]
    assert len(list(backend.iter_stored_records("value"))) == 500  # state without TTL is untouched
    # a state that opted out of background cleanup keeps its (invisible) expired entries until read
    assert len(list(backend.iter_stored_records("no-background-cleanup"))) == 500
    restored = make(kind, storage)
    restore_latest(restored)
    assert len(list(restored.iter_stored_records("list-ttl"))) == 0
    assert len(list(restored.iter_stored_records("value-ttl"))) == 1


# ---- descriptor checks on restore ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_type_change_between_write_and_restore_names_the_state_and_both_types(kind, make, storage):
    source = make(kind, storage)
    count = source.get_or_create_state(ValueStateDescriptor("count", int))
    source.set_current_key("k")
    count.update(41)
    source.snapshot(1)

    restored = make(kind, storage)
    restore_latest(restored)
    with pytest.raises(StateTypeMismatchError, match=r"'count'.*LONG.*dict"):
        restored.get_or_create_state(ValueStateDescriptor("count", dict))
    assert restored.state_names() == []

    registered_first = make(kind, storage)
    registered_first.get_or_create_state(ValueStateDescriptor("count", dict))
    with pytest.raises(StateTypeMismatchError, match=r"'count'.*LONG.*dict"):
        restore_latest(registered_first)
    assert list(registered_first.iter_stored_records("count")) == []  # nothing was loaded


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("target_range", [None, KeyGroupRange(0, 63)], ids=["same-range", "rescaled"])
def test_states_registered_before_restore_see_the_restored_state(kind, target_range, make, storage):
    source = make(kind, storage)
    states = register_all(source)
    for index in range(300):
        write_key(source, states, key_of(index), index)
    source.snapshot(1)
    target = make(kind, storage, key_group_range=target_range)
    registered = register_all(target)
    restore_latest(target)
    owned = target.key_group_range
    checked = 0
    for index in range(300):
        if key_group_for_key(key_of(index), MAX_PARALLELISM) in owned:
            check_key(target, registered, key_of(index), index)
            checked += 1
    assert checked > 0 and len(list(target.iter_keys("value"))) == checked
