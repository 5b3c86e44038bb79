"""Harness snapshots are the committed rows Spark writes per key group (heap: the format-1 row holding the group's
state and timers; RocksDB: the format-2 version record naming a base and changelogs in the checkpoint_dir), and a
restore loads them through the same step: every state type round-trips, only owned key groups load (also from
several partitions' snapshots), RocksDB snapshots store only what changed, and damaged files are named."""

from __future__ import annotations

import os

import pytest

from keyedstate import KeyedProcessFunction, StateTtlConfig, Time, Types
from keyedstate.errors import ConfigurationError, SnapshotCorruptedError, UserFunctionError
from keyedstate.keygroups import key_group_of_key, key_group_range_for_partition
from keyedstate.spark import KeyedProcessOptions
from keyedstate.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.state.key_groups.memory_group_state import MemoryGroupState
from keyedstate.state.key_groups.row_format import (
    STATE_ROW_FORMAT_FULL,
    STATE_ROW_FORMAT_ROCKSDB,
    StateRow,
    decode_state_payload,
)
from keyedstate.state.key_groups.row_store import RowKeyGroupStore
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy, VersionRecord
from keyedstate.testing import KeyedProcessHarness
from timers import InternalTimerService

MAX_PARALLELISM = 128


class Distinct(AggregateFunction):
    """How many distinct numbers were added."""

    def create_accumulator(self):
        return frozenset()

    def add(self, value, accumulator):
        return accumulator | {value % 7}

    def get_result(self, accumulator):
        return len(accumulator)


class EveryState(KeyedProcessFunction):
    """Element (key, number): writes number into a state of every kind; ("key", None) reports them all."""

    def __init__(self, register_map: bool = True, value_type=None):
        self.register_map = register_map
        self.value_type = value_type or Types.LONG()

    def open(self, runtime_context):
        ttl = StateTtlConfig.new_builder(Time.seconds(60)).build()
        expiring = ValueStateDescriptor("expiring", Types.LONG())
        expiring.enable_time_to_live(ttl)
        self.value = runtime_context.get_state(ValueStateDescriptor("value", self.value_type))
        self.expiring = runtime_context.get_state(expiring)
        self.list = runtime_context.get_list_state(ListStateDescriptor("list", Types.LONG()))
        self.map = (runtime_context.get_map_state(MapStateDescriptor("map", Types.STRING(), Types.LONG()))
                    if self.register_map else None)
        self.sum = runtime_context.get_reducing_state(
            ReducingStateDescriptor("sum", lambda a, b: a + b, Types.LONG()))
        self.distinct = runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("distinct", Distinct(), Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx):
        key, number = value
        if number is None:
            yield (key, self.value.value(), self.expiring.value(), sorted(self.list.get() or []),
                   sorted(self.map.items()) if self.map is not None else None, self.sum.get(), self.distinct.get())
            return
        self.value.update(number)
        self.expiring.update(number)
        self.list.add(number)
        if self.map is not None:
            self.map.put(f"m{number % 3}", number)
        self.sum.add(number)
        self.distinct.add(number)
        ctx.timer_service().register_event_time_timer(10_000 + number)


def key_of(index: int) -> str:
    return f"key-{index}"


def fill(harness, keys, offset=0):
    for index in range(keys):
        harness.process_element((key_of(index), index + offset))


def filled_snapshot(backend_kind, keys):
    """The snapshot of a harness that wrote ``keys`` keys, and closed."""
    harness = KeyedProcessHarness(EveryState(), lambda v: v[0], backend=backend_kind).open()
    fill(harness, keys)
    snapshot = harness.snapshot()
    harness.close()
    return snapshot


def restore_from(snapshot, backend_kind, function=None):
    return KeyedProcessHarness.restore(function or EveryState(), lambda v: v[0], snapshot, backend=backend_kind)


def report(harness, keys):
    for index in range(keys):
        harness.process_element((key_of(index), None))
    return sorted(harness.extract_output())


def test_every_state_type_and_the_timers_round_trip(backend_kind):
    original = KeyedProcessHarness(EveryState(), lambda v: v[0], backend=backend_kind).open()
    fill(original, 300)
    fill(original, 300, offset=1_000)
    expected = report(original, 300)
    snapshot = original.snapshot()
    original.close()
    restored = restore_from(snapshot, backend_kind)
    assert restored.num_event_time_timers() == 600
    assert report(restored, 300) == expected
    by_key = {record[0]: record for record in expected}
    assert by_key[key_of(7)][3] == [7, 1_007] and by_key[key_of(7)][5] == 1_014
    restored.close()


def test_the_rows_are_the_ones_spark_commits_per_key_group(backend_kind):
    snapshot = filled_snapshot(backend_kind, 50)
    groups = {key_group_of_key(key_of(i), MAX_PARALLELISM) for i in range(50)}
    assert set(snapshot.rows) == groups  # a row per key group with state, none for the others
    for row in snapshot.rows.values():
        state_row = StateRow.from_row(row)
        assert state_row.key_groups == MAX_PARALLELISM
        if backend_kind == "heap":
            assert state_row.format == STATE_ROW_FORMAT_FULL and state_row.timers
            names = {metadata["name"] for metadata, _ in decode_state_payload(state_row.state)}
            assert names == {"value", "expiring", "list", "map", "sum", "distinct"}
        else:
            assert state_row.format == STATE_ROW_FORMAT_ROCKSDB and state_row.timers == b""
            record = VersionRecord.from_bytes(state_row.state)
            assert record.location == snapshot.storage_uri and record.tag == state_row.tag
            assert all(os.path.exists(os.path.join(snapshot.storage_uri, entry.path)) for entry in record.changelogs)


def test_a_heap_row_loads_into_sparks_row_store_and_saves_back_unchanged():
    snapshot = filled_snapshot("heap", 20)
    key_group, row = next(iter(sorted(snapshot.rows.items())))
    store = RowKeyGroupStore(MAX_PARALLELISM, lambda: 0)  # what a Spark worker runs
    timers = InternalTimerService(store.backend)
    store.load(key_group, MemoryGroupState(row), 0, timers)
    saved = MemoryGroupState()
    store.save(key_group, saved, 0, timers, True)
    again = StateRow.from_row(saved.get)
    assert again.timers == StateRow.from_row(row).timers
    assert sorted(map(repr, decode_state_payload(again.state))) == sorted(
        map(repr, decode_state_payload(StateRow.from_row(row).state)))
    assert isinstance(store.backend, HeapKeyedStateBackend)


def test_states_restored_but_not_registered_are_dropped_by_the_next_snapshot(backend_kind):
    original = KeyedProcessHarness(EveryState(), lambda v: v[0], backend=backend_kind).open()
    fill(original, 30)
    expected = report(original, 30)
    without_map = KeyedProcessHarness.restore(EveryState(register_map=False), lambda v: v[0], original.snapshot(),
                                              backend=backend_kind)
    original.close()
    without_map.process_element((key_of(0), 5))  # changes the key group of key 0, but not its map
    snapshot = without_map.snapshot()
    without_map.close()
    restored = restore_from(snapshot, backend_kind)  # the map registered again: it starts empty in every key group
    reported = report(restored, 30)
    assert {record[0]: record[4] for record in reported} == {key_of(index): [] for index in range(30)}
    assert [record[:4] for record in reported if record[0] != key_of(0)] == [
        record[:4] for record in expected if record[0] != key_of(0)]
    restored.close()


def test_a_type_change_between_snapshot_and_restore_names_the_state_and_both_types(backend_kind):
    snapshot = filled_snapshot(backend_kind, 5)
    with pytest.raises(UserFunctionError, match="StateTypeMismatchError: state 'value' was stored with type "
                                                "value<LONG> but is now registered with type value<STRING>"):
        restore_from(snapshot, backend_kind, EveryState(value_type=Types.STRING()))


def test_a_snapshot_restores_only_into_the_state_backend_that_took_it():
    snapshot = filled_snapshot("rocksdb", 5)
    with pytest.raises(ConfigurationError, match="state_backend='rocksdb'.*state_backend='heap'"):
        restore_from(snapshot, "heap")


def test_snapshots_of_three_partitions_restore_into_one_harness(backend_kind):
    parts = [KeyedProcessHarness(EveryState(), lambda v: v[0], backend=backend_kind, partition=i, partitions=3).open()
             for i in range(3)]
    single = KeyedProcessHarness(EveryState(), lambda v: v[0], backend=backend_kind).open()
    for index in range(90):
        key = key_of(index)
        owner = next(i for i in range(3) if key_group_of_key(key, MAX_PARALLELISM)
                     in key_group_range_for_partition(i, 3, MAX_PARALLELISM))
        parts[owner].process_element((key, index))
        single.process_element((key, index))
    expected = report(single, 90)
    single.close()
    snapshots = [part.snapshot() for part in parts]
    for part in parts:
        part.close()
    merged = restore_from(snapshots, backend_kind)
    assert report(merged, 90) == expected and len(expected) == 90
    assert merged.num_event_time_timers() == 90
    merged.process_element((key_of(1), 500))  # continues: the next snapshot stores the key groups in its own dir
    again = restore_from(merged.snapshot(), backend_kind)
    merged.close()
    assert [r for r in report(again, 2) if r[0] == key_of(1)][0][3] == [1, 500]
    again.close()


def _stored_bytes(directory):
    return {os.path.join(root, name): os.path.getsize(os.path.join(root, name))
            for root, _, names in os.walk(directory) for name in names}


def test_rocksdb_snapshots_store_per_key_group_only_what_changed():
    harness = KeyedProcessHarness(EveryState(), lambda v: v[0], backend="rocksdb").open()
    fill(harness, 2_000)
    first = harness.snapshot()
    before = _stored_bytes(first.storage_uri)
    harness.process_element((key_of(3), 77))  # one key of one key group
    second = harness.snapshot()
    changed = key_group_of_key(key_of(3), MAX_PARALLELISM)
    assert {kg for kg in first.rows if first.rows[kg] != second.rows[kg]} == {changed}
    old, new = (VersionRecord.from_bytes(StateRow.from_row(s.rows[changed]).state) for s in (first, second))
    assert new.changelogs[:-1] == old.changelogs and new.base == old.base  # one more changelog, same base
    added = {path: size for path, size in _stored_bytes(first.storage_uri).items() if path not in before}
    assert len(added) == 1 and sum(added.values()) < sum(before.values()) / 100
    restored = restore_from(second, "rocksdb")
    assert [r for r in report(restored, 4) if r[0] == key_of(3)][0][3] == [3, 77]
    restored.close()
    harness.close()


def test_rocksdb_bases_are_taken_by_the_policy_and_restore_with_their_changelogs():
    policy = SnapshotPolicy(max_changelogs=2, min_changelog_bytes=1 << 30)
    options = KeyedProcessOptions(state_backend="rocksdb", snapshot_policy=policy)  # the job's, as on Spark
    harness = KeyedProcessHarness(EveryState(), lambda v: v[0], options=options).open()
    key_group = key_group_of_key(key_of(0), MAX_PARALLELISM)
    records = []
    for round_ in range(4):
        harness.process_element((key_of(0), round_))
        records.append(VersionRecord.from_bytes(StateRow.from_row(harness.snapshot().rows[key_group]).state))
    assert [r.base is not None for r in records] == [False, False, True, True]
    assert [len(r.changelogs) for r in records] == [1, 2, 0, 1]
    versions = KeyGroupVersions(harness._persistence().storage, key_group, MAX_PARALLELISM)
    assert any(entry.name.endswith(".sst")
               for entry in versions.read_manifest(records[2].base, records[2].base_batch).files)
    snapshot = harness.snapshot()
    harness.close()
    restored = restore_from(snapshot, "rocksdb")
    assert report(restored, 1)[0][3] == [0, 1, 2, 3]
    restored.close()


@pytest.mark.parametrize("damaged", ["changelog", "base"])
def test_a_byte_flipped_in_a_stored_file_fails_the_restore_naming_the_file(damaged):
    every_snapshot_a_base = SnapshotPolicy(max_changelogs=0) if damaged == "base" else None
    options = KeyedProcessOptions(state_backend="rocksdb", snapshot_policy=every_snapshot_a_base)
    harness = KeyedProcessHarness(EveryState(), lambda v: v[0], options=options).open()
    fill(harness, 10)
    snapshot = harness.snapshot()
    harness.close()
    key_group, row = sorted(snapshot.rows.items())[0]
    record = VersionRecord.from_bytes(StateRow.from_row(row).state)
    if damaged == "changelog":
        relative = record.changelogs[0].path
    else:
        manifest = KeyGroupVersions(harness._persistence().storage, key_group, MAX_PARALLELISM).read_manifest(
            record.base, record.base_batch)
        relative = next(entry.path for entry in manifest.files if entry.name.endswith(".sst"))
    path = os.path.join(snapshot.storage_uri, relative)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))
    with pytest.raises(SnapshotCorruptedError, match=relative.replace("/", ".")):
        restore_from(snapshot, "rocksdb")


def test_expired_state_is_not_in_the_next_snapshot(backend_kind):
    harness = KeyedProcessHarness(EveryState(), lambda v: v[0], backend=backend_kind).open()
    fill(harness, 20)
    harness.set_processing_time(61_000)  # "expiring" (60 s TTL, cleanup in background) expired for every key
    snapshot = harness.snapshot()
    harness.close()
    if backend_kind == "heap":
        for row in snapshot.rows.values():
            names = {m["name"] for m, records in decode_state_payload(StateRow.from_row(row).state) if records}
            assert "expiring" not in names and "value" in names
    restored = restore_from(snapshot, backend_kind)
    restored.set_processing_time(0)  # even with the clock back, nothing expired comes back
    assert all(record[2] is None and record[1] is not None for record in report(restored, 20))
    restored.close()


def test_a_call_of_the_rocksdb_store_runs_load_save_finish_in_order_and_a_failed_save_keeps_nothing(tmp_path):
    from keyedstate.checkpoint.storage import CheckpointStorage
    from keyedstate.errors import StateBackendError
    from keyedstate.state.key_groups.versioned import CallStatus
    from keyedstate.state.rocksdb import RocksDBKeyedStateBackend
    from keyedstate.testing.snapshots import HarnessRocksDBStore

    class Refusing(MemoryGroupState):
        def update(self, row):
            raise OSError("the row cannot be written")

    backend = RocksDBKeyedStateBackend(tmp_path / "db", num_key_groups=MAX_PARALLELISM, record_changes=True)
    count = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    backend.set_current_key("a")
    count.update(1)
    key_group = key_group_of_key("a", MAX_PARALLELISM)
    store = HarnessRocksDBStore(backend, CheckpointStorage(str(tmp_path / "storage")))
    holder = MemoryGroupState()
    with pytest.raises(StateBackendError, match="saved before it was loaded"):
        store.save(key_group, holder, 1, None, False)
    store.load(key_group, holder, 1, None)
    assert store.call is not None and store.call.status is CallStatus.LOADED
    with pytest.raises(StateBackendError, match=f"starts before key group {key_group}'s finished"):
        store.load(key_group + 1, MemoryGroupState(), 1, None)
    store.save(key_group, holder, 1, None, False)
    assert store.call.status is CallStatus.SAVED and holder.exists
    with pytest.raises(StateBackendError, match="saved before it was loaded"):
        store.save(key_group, holder, 1, None, False)
    store.finish(key_group, None, True)
    assert store.call is None and key_group in store.tags  # kept at the saved version

    count.update(2)
    store.changes = {key_group: []}  # as a snapshot cuts them: what the next call stores
    refusing = Refusing(holder.get)
    store.load(key_group, refusing, 2, None)
    with pytest.raises(OSError, match="cannot be written"):
        store.save(key_group, refusing, 2, None, False)
    assert store.call is not None and store.call.status is CallStatus.FAILED
    store.finish(key_group, None, False)
    assert store.call is None and store.tags[key_group] == StateRow.from_row(holder.get).tag  # the committed one
    store.close()
    backend.close()
