"""RocksDB ValueState keeps the entry it last wrote back from RocksDB until the key changes: a run of one key's
elements costs one read and one write, and nothing that reads the database (iteration, changelogs, snapshots,
closing, handing the database on) ever misses a write. Mutable values still come back as fresh copies."""

from __future__ import annotations

from keyedstate import Types, ValueStateDescriptor
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from keyedstate.state.rocksdb.changelog import PUT
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend


def counting(backend):
    return backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))


def puts_of_count(changes) -> int:
    return sum(1 for op, family, _, _ in changes.ops if op == PUT and family == "state:count")


def test_a_run_of_updates_to_one_key_writes_rocksdb_once(tmp_path):
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=4)
    count = counting(backend)
    backend.open_key_group(str(tmp_path / "live"))
    for key in ("a", "b"):
        backend.set_current_key(key)
        for _ in range(5):
            count.update((count.value() or 0) + 1)
    changes = backend.take_changes()
    assert puts_of_count(changes) == 2  # one per key, although each was updated five times
    assert sorted(backend.iter_keys("count")) == ["a", "b"]
    backend.close()


def test_every_reader_of_the_database_sees_the_last_write(tmp_path):
    backend = RocksDBKeyedStateBackend(tmp_path / "db", num_key_groups=4)
    count = counting(backend)
    backend.set_current_key("a")
    count.update(41)
    count.update(42)
    assert [value for _, value in backend.iter_stored_records("count")] == [Types.LONG().serializer.serialize(42)]
    assert backend.count_keys_with_state() == 1
    backend.set_current_key("a")
    count.update(43)
    backend.close()

    reopened = RocksDBKeyedStateBackend(tmp_path / "db", num_key_groups=4,
                                        options=RocksDBOptions(reuse_existing=True))
    state = counting(reopened)
    reopened.set_current_key("a")
    assert state.value() == 43  # written before the database closed
    reopened.close()


def test_switching_keys_and_coming_back_reads_each_keys_own_value(tmp_path):
    backend = RocksDBKeyedStateBackend(tmp_path / "db", num_key_groups=4)
    count = counting(backend)
    for key, value in (("a", 1), ("b", 2), ("a", 3), ("c", 4)):
        backend.set_current_key(key)
        count.update(value)
    for key, value in (("a", 3), ("b", 2), ("c", 4)):
        backend.set_current_key(key)
        assert count.value() == value
    backend.set_current_key("c")
    count.clear()
    assert count.value() is None
    backend.set_current_key("a")
    assert count.value() == 3
    backend.close()


def test_mutable_values_are_fresh_copies_before_and_after_the_write_is_kept_back(tmp_path):
    backend = RocksDBKeyedStateBackend(tmp_path / "db", num_key_groups=4)
    state = backend.get_or_create_state(ValueStateDescriptor("seen", Types.PICKLED_BYTE_ARRAY()))
    backend.set_current_key("a")
    value = [1]
    state.update(value)
    value.append(2)  # after update(): not part of the state, as with Flink's RocksDB backend
    assert state.value() == [1]
    state.value().append(3)
    assert state.value() == [1]
    immutable = (1, "x")
    state.update(immutable)
    assert state.value() == (1, "x")
    backend.close()


def test_a_database_handed_on_carries_the_kept_back_write_and_the_next_one_starts_clean(tmp_path):
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=4)
    count = counting(backend)
    backend.open_key_group(str(tmp_path / "one"))
    backend.set_current_key("a")
    count.update(7)
    database = backend.detach_key_group()

    backend.open_key_group(str(tmp_path / "two"))  # another key group's database: "a" has no value there
    backend.set_current_key("a")
    assert count.value() is None
    count.update(1)
    backend.close_key_group()

    backend.attach_key_group(database)
    backend.set_current_key("a")
    assert count.value() == 7
    backend.close_key_group()


def test_a_kept_back_write_that_fails_when_another_key_is_read_raises_naming_the_state(tmp_path):
    import pytest

    from keyedstate.errors import StateBackendError

    backend = RocksDBKeyedStateBackend(tmp_path / "db")
    count = counting(backend)
    backend.set_current_key("a")
    count.update(7)  # kept back in the store's memo
    store = backend.registered_state("count").store
    family = store.entries

    class DiskFull:  # the family as RocksDB behaves when a write fails
        def put(self, key, value):
            raise Exception("IO error: No space left on device")

        def get(self, key):
            return family.get(key)

    store.entries = DiskFull()
    backend.set_current_key("b")
    with pytest.raises(StateBackendError, match="'count'"):
        count.value()  # reading b writes a's entry back first
    assert store.memo_data is None  # as the store's own write_pending(): the failed call is not continued
    store.entries = family
    backend.close()
