"""The key-group RocksDB backend of Spark's RocksDB mode: its recorded changelog, replayed on a copy of the state it
started from, gives the same state; incompatible stored types are refused; expired TTL entries leave storage when a
base snapshot is taken."""

from __future__ import annotations

import random
import shutil

import msgpack
import pytest

from keyedstate import ListStateDescriptor, MapStateDescriptor, StateTtlConfig, Time, Types, ValueStateDescriptor
from keyedstate.errors import SnapshotCorruptedError, StateTypeMismatchError
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from keyedstate.state.rocksdb.changelog import DELETE, DELETE_RANGE, PUT, ChangeLog
from keyedstate.state.rocksdb.db import RocksDatabase
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend

DESCRIPTORS = (
    ValueStateDescriptor("count", Types.LONG()),
    ListStateDescriptor("events", Types.STRING()),
    MapStateDescriptor("kinds", Types.STRING(), Types.LONG()),
)


def everything(backend) -> dict:
    return {name: sorted(backend.iter_stored_records(name)) for name in sorted(backend.stored_state_names())}


def register(backend):
    return [backend.get_or_create_state(descriptor) for descriptor in DESCRIPTORS]


def write_some(backend, keys, round_: int) -> None:
    count, events, kinds = register(backend)
    for key in keys:
        backend.set_current_key(key)
        count.update((count.value() or 0) + round_)
        events.add(f"e{round_}")
        if round_ % 2:
            events.update([f"replaced{round_}"])  # a range delete and puts
        kinds.put(f"k{round_ % 3}", round_)
        if round_ == 3:
            kinds.remove("k0")
        if key == "gone":
            count.clear()
            events.clear()
            kinds.clear()


def test_replaying_the_recorded_writes_on_the_old_state_gives_the_new_state(tmp_path):
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=4)
    register(backend)
    backend.open_key_group(str(tmp_path / "live"))
    write_some(backend, ["a", "b", "gone"], 1)
    backend.take_changes()
    backend.close_key_group()
    shutil.copytree(tmp_path / "live", tmp_path / "replica")  # the state the changelog starts from

    backend.open_key_group(str(tmp_path / "live"))
    for round_ in (2, 3):
        write_some(backend, ["a", "b", "c", "gone"], round_)
    changes = backend.take_changes()
    expected = everything(backend)
    backend.close()
    assert len(changes) > 10

    replica = RocksDBKeyedStateBackend(tmp_path / "replica", num_key_groups=4,
                                       options=RocksDBOptions(reuse_existing=True))
    replica.replay(ChangeLog.decode(changes.encode(), "test"))
    assert everything(replica) == expected
    replica.close()


def test_a_key_group_database_with_an_incompatible_stored_type_is_refused_by_name(tmp_path):
    writer = KeyGroupRocksDBBackend(tmp_path / "idle-1", num_key_groups=4)
    writer.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    writer.open_key_group(str(tmp_path / "kg"))
    writer.close()
    reader = KeyGroupRocksDBBackend(tmp_path / "idle-2", num_key_groups=4)
    reader.get_or_create_state(ValueStateDescriptor("count", Types.STRING()))
    with pytest.raises(StateTypeMismatchError, match="'count' was stored with type"):
        reader.open_key_group(str(tmp_path / "kg"))
    reader.close()


def test_a_damaged_changelog_is_refused_naming_it():
    with pytest.raises(SnapshotCorruptedError, match="changelog kg-00001/c1.log cannot be decoded"):
        ChangeLog.decode(b"\x93garbage", "kg-00001/c1.log")


def test_expired_ttl_entries_are_never_read_and_leave_storage_with_the_next_base_snapshot(tmp_path):
    now = [1_000_000]
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=4, ttl_clock=lambda: now[0])
    descriptor = ValueStateDescriptor("seen", Types.STRING())
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(10)).build())
    seen = backend.get_or_create_state(descriptor)
    backend.open_key_group(str(tmp_path / "kg"))
    for key in ["a", "b"]:
        backend.set_current_key(key)
        seen.update("x")
    now[0] += 10_000
    # no scan per call (RocksDB mode's store skips the per-call cleanup): the entries stay until a base snapshot
    assert len(list(backend.iter_stored_records("seen"))) == 2
    backend.set_current_key("a")
    assert seen.value() is None  # expired: never returned
    backend.checkpoint(str(tmp_path / "base"))
    assert list(backend.iter_stored_records("seen")) == []
    backend.close()


def test_a_stored_changelog_keeps_only_each_keys_last_point_write_and_every_range_delete_in_order():
    log = ChangeLog([(PUT, "s", b"k1", b"1"), (PUT, "s", b"k1", b"2"), (DELETE_RANGE, "s", b"k", b"l"),
                     (PUT, "s", b"k1", b"3"), (PUT, "t", b"k1", b"x"), (PUT, "s", b"k2", b"1"),
                     (DELETE, "s", b"k2", None)])
    assert ChangeLog.decode(log.encode(), "test").ops == [
        (DELETE_RANGE, "s", b"k", b"l"), (PUT, "s", b"k1", b"3"), (PUT, "t", b"k1", b"x"), (DELETE, "s", b"k2", None)]


@pytest.mark.compiled_only
def test_the_compiled_content_encoder_is_a_twin_of_the_python_one():
    """``encode_changelog_contents`` gives ``_encode_contents``' bytes at every msgpack length boundary; anything
    else than (str, bytes keys, bytes values of the same count) goes to the Python encoder, errors included."""
    from keyedstate.fastpath import fastpath
    from keyedstate.state.rocksdb.changelog import _VERSION, _encode_contents

    assert fastpath is not None

    def compiled(families):
        return fastpath.encode_changelog_contents(families, _VERSION, PUT, _encode_contents)

    rng = random.Random(3)
    sizes = [0, 1, 31, 32, 255, 256, 65535, 65536]
    families = [(name, [rng.randbytes(size) for size in sizes], [rng.randbytes(size) for size in reversed(sizes)])
                for name in ["state:a", "", "s" * 31, "s" * 32, "n" * 255, "n" * 256, "é" * 40000]]
    families += [("empty", [], []), ("tuples", (b"k",), (b"v",))]
    families += [(f"state:{n}", [b"%d" % i for i in range(n)], [b"v"] * n) for n in (15, 16, 4000, 17000)]
    families += [(f"many:{n}", [b"k"], [b"v"]) for n in range(130)]  # name indexes past 127 and 255
    for chosen in ([], families[:1], families[:2], families[6:9], families, families[-140:]):
        encoded = compiled(list(chosen))
        assert encoded == _encode_contents(list(chosen))
        assert msgpack.unpackb(encoded, raw=False)[1] == [name for name, keys, _ in chosen if keys]
    odd = [[("state:a", [b"k", bytearray(b"b")], [b"1", b"2"])], [("state:a", [b"k"], [b"1", b"2"])],
           [("state:a", [b"k"], [memoryview(b"1")])], [["state:a", [b"k"], [b"1"]]],
           [("state:a", iter([b"k"]), [b"1"])]]
    for families_ in odd:
        try:
            expected = _encode_contents(families_)
        except Exception as python_error:
            with pytest.raises(type(python_error)):
                compiled(families_)
        else:
            assert compiled(families_) == expected
    assert compiled(tuple(families[:2])) == _encode_contents(tuple(families[:2]))


def test_a_database_opened_empty_without_recording_hands_out_its_whole_content_as_the_changes(tmp_path):
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=4)
    register(backend)
    backend.open_key_group(str(tmp_path / "fresh"), record_changes=False)
    write_some(backend, ["a", "b"], 1)
    expected = everything(backend)
    changes = backend.take_changes()
    backend.close()
    replica = RocksDBKeyedStateBackend(tmp_path / "replica", num_key_groups=4)
    replica.replay(ChangeLog.decode(changes.encode(), "test"))
    assert everything(replica) == expected and sorted(replica.stored_state_names()) == ["count", "events", "kinds"]
    replica.close()
    # kept as each family's keys and values: encoded to the bytes the same puts as operations encode to
    assert changes.encode() == ChangeLog(list(changes.ops)).encode()
    assert len(changes) == len(changes.ops) and bool(changes) and not ChangeLog.of_contents([("state:x", [], [])])


def test_a_new_database_hands_back_what_it_was_given_in_one_batch_per_family_without_reading_it_back(tmp_path):
    """Reading a first call's whole content back costs about a twentieth of the call: the entries written whole
    are the content, in the order they were written, as long as nothing else wrote to the database."""
    database = RocksDatabase(str(tmp_path / "new"), RocksDBOptions(reuse_existing=True), families=["state:a"],
                             capture_content=True)
    database.put_entries("state:a", [b"k2", b"k1"], [b"2", b"1"])
    database.put_entries("default", [b"m"], [b"meta"])
    assert database.contents_as_changes().ops == [
        (PUT, "state:a", b"k2", b"2"), (PUT, "state:a", b"k1", b"1"), (PUT, "default", b"m", b"meta")]
    database.close()


@pytest.mark.parametrize("other_write", [
    lambda db: db.column_families["state:a"].delete(b"k1"),
    lambda db: db.column_families["state:a"].delete(b"missing"),  # changes nothing, still an operation
    lambda db: db.column_families["state:a"].put(b"k1", b"changed"),
    lambda db: db.column_families["state:a"].delete_range(b"k", b"l"),
    lambda db: db.put_entries("state:a", [b"k1"], [b"again"]),  # the same family written twice
    lambda db: db.drop_column_family("state:b"),
], ids=["delete", "delete of a missing key", "single put", "range delete", "second batch", "dropped family"])
def test_a_new_database_written_any_other_way_reads_its_content_back(tmp_path, other_write):
    database = RocksDatabase(str(tmp_path / "new"), RocksDBOptions(reuse_existing=True),
                             families=["state:a", "state:b"], capture_content=True)
    database.put_entries("state:a", [b"k2", b"k1"], [b"2", b"1"])
    database.put_entries("state:b", [b"x"], [b"y"])
    other_write(database)
    content = sorted((name, key, value) for name, family in database.column_families.items()
                     for key, value in family.items())
    assert sorted((name, key, value) for _, name, key, value in database.contents_as_changes().ops) == content
    database.close()


def test_only_a_database_that_starts_empty_and_unrecorded_captures_its_content(tmp_path):
    stored = RocksDatabase(str(tmp_path / "stored"), RocksDBOptions(reuse_existing=True), families=["state:a"])
    stored.put_entries("state:a", [b"old"], [b"0"])
    stored.close()
    reopened = RocksDatabase(str(tmp_path / "stored"), RocksDBOptions(reuse_existing=True), capture_content=True)
    reopened.put_entries("state:a", [b"new"], [b"1"])
    assert [key for _, _, key, _ in reopened.contents_as_changes().ops] == [b"new", b"old"]  # sorted: read back
    reopened.close()


def test_a_first_call_of_value_states_and_timers_stores_exactly_the_new_databases_content(tmp_path):
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=4)
    count = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    timers = backend.raw_column("_timer_state/event_t")
    backend.open_key_group(str(tmp_path / "fresh"), record_changes=False)
    for key in ["b", "a", "c"]:
        backend.set_current_key(key)
        count.update(len(key) + 40)
    timers.put_many([(b"\x00\x02t2", b"x"), (b"\x00\x01t1", b"y")])
    backend.set_current_key("c")
    count.clear()  # after the values were written whole: this delete makes the database read back its content
    backend.set_current_key("a")
    count.update(7)
    expected = everything(backend)
    changes = ChangeLog.decode(backend.take_changes().encode(), "test")
    backend.close()
    replica = RocksDBKeyedStateBackend(tmp_path / "replica", num_key_groups=4)
    replica.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    replica.replay(changes)
    assert everything(replica) == expected == {"count": sorted(expected["count"])} and len(expected["count"]) == 2
    assert sorted(replica.raw_column("_timer_state/event_t").items()) == [(b"\x00\x01t1", b"y"), (b"\x00\x02t2", b"x")]
    replica.close()


def test_a_settled_database_attached_again_by_another_backend_is_checked_against_its_states(tmp_path):
    """A database detached with every state settled is trusted again, without reading its metadata, only by the
    backend that detached it and with the same states registered."""
    writer = KeyGroupRocksDBBackend(tmp_path / "idle-1", num_key_groups=4)
    count = writer.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    writer.open_key_group(str(tmp_path / "kg"))
    writer.settle_restored_states()
    writer.set_current_key("a")
    count.update(5)
    database = writer.detach_key_group()
    writer.attach_key_group(database)  # the same backend: trusted
    writer.settle_restored_states()
    writer.set_current_key("a")
    assert count.value() == 5
    database = writer.detach_key_group()

    reader = KeyGroupRocksDBBackend(tmp_path / "idle-2", num_key_groups=4)
    reader.get_or_create_state(ValueStateDescriptor("count", Types.STRING()))
    with pytest.raises(StateTypeMismatchError, match="'count' was stored with type"):
        reader.attach_key_group(database)
    database.close()
    reader.close()
    writer.close()


def test_changes_replayed_into_a_settled_database_are_settled_again(tmp_path):
    """Changes another worker wrote may describe a state this function no longer registers: the next settle drops
    it, also on a database that was detached settled and trusted again."""
    other = KeyGroupRocksDBBackend(tmp_path / "idle-other", num_key_groups=4)
    old_count = other.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    removed = other.get_or_create_state(ValueStateDescriptor("removed", Types.LONG()))
    other.open_key_group(str(tmp_path / "other"))
    other.take_changes()
    other.set_current_key("a")
    old_count.update(1)
    removed.update(2)
    changes = ChangeLog.decode(other.take_changes().encode(), "changelog")
    other.close()

    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=4)
    count = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    backend.open_key_group(str(tmp_path / "kg"))
    backend.settle_restored_states()
    database = backend.detach_key_group()
    backend.attach_key_group(database)
    backend.replay(changes)
    assert len(list(backend.iter_stored_records("removed"))) == 1
    backend.settle_restored_states()
    assert list(backend.iter_stored_records("removed")) == []
    backend.set_current_key("a")
    assert count.value() == 1
    backend.close_key_group()
    backend.close()


def test_a_new_database_has_the_raw_columns_an_earlier_one_was_written_in_from_its_open(tmp_path):
    """Creating a column family in an open database rewrites its options file; at the open it is nearly free."""
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=4)
    written, untouched = backend.raw_column("_timer_state/event_t"), backend.raw_column("_timer_state/processing_t")
    backend.open_key_group(str(tmp_path / "first"), record_changes=False)
    assert written.family_name not in backend.database.column_families  # created by the first write, as before
    written.put(b"\x00\x01", b"timer")
    backend.take_changes()
    backend.close_key_group()
    backend.open_key_group(str(tmp_path / "second"), record_changes=False)
    families = backend.database.column_families
    assert written.family_name in families and untouched.family_name not in families
    assert written.get(b"\x00\x01") is None and backend.raw_column_names() == ["_timer_state/event_t"]
    assert not backend.take_changes()  # an empty family stores nothing
    backend.close_key_group()
    RocksDBKeyedStateBackend(tmp_path / "stored", num_key_groups=4).close()
    backend.open_key_group(str(tmp_path / "stored"), record_changes=True)  # a stored database: opened as it is
    assert written.family_name not in backend.database.column_families
    backend.close()


def test_a_new_database_kept_open_after_its_first_call_keeps_that_content_in_memory_and_records_what_follows(
        tmp_path):
    """rocksdict flushes a column family when an object that handed it out is dropped: starting to record must not
    re-fetch the families, or every first call would write its whole content to SST files on the way out."""
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=4)
    count, _, _ = register(backend)
    backend.open_key_group(str(tmp_path / "fresh"), record_changes=False)
    write_some(backend, ["a", "b"], 1)
    first = everything(backend)
    assert backend.take_changes()
    backend.start_recording()
    database = backend.detach_key_group()  # kept open for the next call
    assert database.live_sst_files() == {}  # nothing flushed: the first call's content is stored already
    backend.attach_key_group(database)
    assert everything(backend) == first
    backend.set_current_key("a")
    count.update(41)
    assert [(op, family) for op, family, _, _ in backend.take_changes().ops] == [(PUT, "state:count")]
    backend.close()
