"""Every state primitive behaves the same on every backend (semantics.md item 9; item 12, TTL, is in
test_ttl_conformance.py)."""

from __future__ import annotations

import threading

import pytest

from keyedstate import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    Types,
    ValueStateDescriptor,
)
from keyedstate.errors import (
    NoKeyContextError,
    NullKeyError,
    SerializationError,
    StateDescriptorConflictError,
    StateTypeMismatchError,
    UnsupportedKeyTypeError,
)
from keyedstate.state.base import StateMetadata
from keyedstate.state.rocksdb.changelog import ChangeLog
from tests.state.sample_descriptors import Average

# ---- scoping -----------------------------------------------------------------------------------------------------


class TestKeyScoping:
    def test_value_state_is_scoped_to_the_current_key(self, backend):
        count = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
        backend.set_current_key("alice")
        count.update(1)
        backend.set_current_key("bob")
        assert count.value() is None
        count.update(2)
        backend.set_current_key("alice")
        assert count.value() == 1

    def test_every_kind_of_state_is_scoped_to_the_current_key(self, backend):
        items = backend.get_or_create_state(ListStateDescriptor("items", int))
        totals = backend.get_or_create_state(MapStateDescriptor("totals", str, int))
        summed = backend.get_or_create_state(ReducingStateDescriptor("sum", lambda a, b: a + b, int))
        average = backend.get_or_create_state(AggregatingStateDescriptor("avg", Average(), tuple))
        backend.set_current_key(("tenant", 1))
        items.add(1)
        totals.put("x", 1)
        summed.add(5)
        average.add(4)
        backend.set_current_key(("tenant", 2))
        assert items.get() == []
        assert totals.is_empty()
        assert summed.get() is None
        assert average.get() is None
        backend.set_current_key(("tenant", 1))
        assert (items.get(), dict(totals.items()), summed.get(), average.get()) == ([1], {"x": 1}, 5, 4.0)

    def test_keys_of_different_types_that_compare_equal_are_different_keys(self, backend):
        count = backend.get_or_create_state(ValueStateDescriptor("count", int))
        for key, value in ((1, 10), (1.0, 20), (True, 30), ("1", 40)):
            backend.set_current_key(key)
            count.update(value)
        backend.set_current_key(1)
        assert count.value() == 10
        backend.set_current_key(True)
        assert count.value() == 30

    def test_state_is_scoped_to_the_namespace(self, backend):
        count = backend.get_or_create_state(ValueStateDescriptor("count", int))
        entries = backend.get_or_create_state(MapStateDescriptor("entries", str, int))
        backend.set_current_key("k")
        count.set_current_namespace("window-1")
        entries.set_current_namespace("window-1")
        count.update(1)
        entries.put("a", 1)
        count.set_current_namespace("window-2")
        entries.set_current_namespace("window-2")
        assert count.value() is None
        assert entries.is_empty()
        count.set_current_namespace(None)
        assert count.value() is None

    def test_using_state_without_a_current_key_is_a_clear_error(self, backend):
        count = backend.get_or_create_state(ValueStateDescriptor("count", int))
        with pytest.raises(NoKeyContextError, match="no current key"):
            count.value()

    def test_iter_keys_lists_every_key_with_state_once(self, backend):
        items = backend.get_or_create_state(ListStateDescriptor("items", int))
        for key in ("a", "b", "c"):
            backend.set_current_key(key)
            items.add_all([1, 2])
        assert sorted(backend.iter_keys("items")) == ["a", "b", "c"]


# ---- operations --------------------------------------------------------------------------------------------------


class TestValueState:
    def test_update_value_clear(self, backend):
        state = backend.get_or_create_state(ValueStateDescriptor("v", dict))
        backend.set_current_key(7)
        assert state.value() is None
        state.update({"a": [1, 2], "b": None})
        assert state.value() == {"a": [1, 2], "b": None}
        state.clear()
        assert state.value() is None

    def test_update_with_none_clears(self, backend):
        state = backend.get_or_create_state(ValueStateDescriptor("v", int))
        backend.set_current_key(7)
        state.update(3)
        state.update(None)
        assert state.value() is None
        assert list(backend.iter_stored_records("v")) == []

    @pytest.mark.parametrize(
        "value",
        [0, -(2**70), 3.5, "text", b"\x00bytes", True, [1, [2]], (1, "a"), {"k": (1, 2)}, {1, 2}, frozenset({3})],
    )
    def test_common_python_values_round_trip_exactly(self, backend, value):
        state = backend.get_or_create_state(ValueStateDescriptor("v"))
        backend.set_current_key("k")
        state.update(value)
        assert state.value() == value
        assert type(state.value()) is type(value)


class TestListState:
    def test_add_add_all_get_keep_insertion_order(self, backend):
        state = backend.get_or_create_state(ListStateDescriptor("l", str))
        backend.set_current_key("k")
        assert state.get() == []
        state.add("a")
        state.add_all(["b", "c"])
        state.add("d")
        assert state.get() == ["a", "b", "c", "d"]
        assert list(state) == ["a", "b", "c", "d"]

    def test_update_replaces_and_empty_update_clears(self, backend):
        state = backend.get_or_create_state(ListStateDescriptor("l", int))
        backend.set_current_key("k")
        state.add_all([1, 2, 3])
        state.update([9])
        assert state.get() == [9]
        state.add(10)
        assert state.get() == [9, 10]
        state.update([])
        assert state.get() == []
        state.add(1)
        state.update(None)
        assert state.get() == []

    def test_get_returns_a_copy(self, backend):
        state = backend.get_or_create_state(ListStateDescriptor("l", int))
        backend.set_current_key("k")
        state.add(1)
        state.get().append(2)
        assert state.get() == [1]

    def test_none_elements_are_rejected_and_nothing_is_written(self, backend):
        state = backend.get_or_create_state(ListStateDescriptor("l", int))
        backend.set_current_key("k")
        state.add(1)
        with pytest.raises(StateTypeMismatchError, match="None"):
            state.add_all([2, None])
        assert state.get() == [1]

    def test_clear(self, backend):
        state = backend.get_or_create_state(ListStateDescriptor("l", int))
        backend.set_current_key("k")
        state.add_all([1, 2])
        state.clear()
        assert state.get() == []


class TestMapState:
    def test_put_get_contains_remove(self, backend):
        state = backend.get_or_create_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
        backend.set_current_key("k")
        assert state.get("a") is None
        assert not state.contains("a")
        state.put("a", 1)
        state.put("a", 2)
        assert state.get("a") == 2
        assert state.contains("a") and "a" in state
        state.remove("a")
        state.remove("never-there")
        assert not state.contains("a")

    def test_none_is_a_storable_value_distinct_from_absent(self, backend):
        state = backend.get_or_create_state(MapStateDescriptor("m", str, int))
        backend.set_current_key("k")
        state.put("a", None)
        assert state.contains("a")
        assert state.get("a") is None
        assert not state.is_empty()

    def test_put_all_keys_values_items_is_empty_clear(self, backend):
        state = backend.get_or_create_state(MapStateDescriptor("m", int, str))
        backend.set_current_key("k")
        assert state.is_empty()
        state.put_all({3: "c", 1: "a", 2: "b"})
        assert dict(state.items()) == {1: "a", 2: "b", 3: "c"}
        assert sorted(state.keys()) == [1, 2, 3]
        assert sorted(state.values()) == ["a", "b", "c"]
        state.clear()
        assert state.is_empty()
        assert dict(state.items()) == {}

    def test_the_map_may_be_modified_while_iterating(self, backend):
        state = backend.get_or_create_state(MapStateDescriptor("m", int, int))
        backend.set_current_key("k")
        state.put_all({i: i for i in range(10)})
        for key, value in state.items():
            if value % 2:
                state.remove(key)
        assert sorted(state.keys()) == [0, 2, 4, 6, 8]

    def test_dict_style_access(self, backend):
        state = backend.get_or_create_state(MapStateDescriptor("m", str, int))
        backend.set_current_key("k")
        state["x"] = 1
        assert state["x"] == 1
        del state["x"]
        assert "x" not in state

    def test_tuple_map_keys_and_unsupported_map_keys(self, backend):
        state = backend.get_or_create_state(MapStateDescriptor("m", tuple, int))
        backend.set_current_key("k")
        state.put(("a", 1), 1)
        assert state.get(("a", 1)) == 1
        with pytest.raises(UnsupportedKeyTypeError, match="map state 'm'"):
            state.put({"not": "hashable"}, 2)
        assert dict(state.items()) == {("a", 1): 1}


class TestReducingAndAggregatingState:
    def test_reducing_state_folds_with_the_reduce_function(self, backend):
        state = backend.get_or_create_state(ReducingStateDescriptor("max", max, int))
        backend.set_current_key("k")
        assert state.get() is None
        for value in (3, 9, 4):
            state.add(value)
        assert state.get() == 9
        state.clear()
        assert state.get() is None

    def test_aggregating_state_uses_accumulator_and_result(self, backend):
        state = backend.get_or_create_state(AggregatingStateDescriptor("avg", Average(), tuple))
        backend.set_current_key("k")
        for value in (1, 2, 6):
            state.add(value)
        assert state.get() == 3.0
        state.clear()
        assert state.get() is None


# ---- bad input ---------------------------------------------------------------------------------------------------


class TestBadInput:
    @pytest.mark.parametrize("key", [[1, 2], {"a": 1}, {1}, object(), float("nan")])
    def test_unsupported_key_types_are_rejected(self, backend, key):
        with pytest.raises(UnsupportedKeyTypeError):
            backend.set_current_key(key)

    def test_a_null_key_is_rejected(self, backend):
        with pytest.raises(NullKeyError, match="None"):
            backend.set_current_key(None)

    def test_writing_a_value_of_the_wrong_type_fails_and_writes_nothing(self, backend):
        state = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
        backend.set_current_key("k")
        state.update(1)
        with pytest.raises(StateTypeMismatchError, match="'count'.*LONG.*str"):
            state.update("one")
        assert state.value() == 1

    def test_an_unserializable_value_fails_and_writes_nothing(self, backend):
        state = backend.get_or_create_state(ValueStateDescriptor("holder"))
        backend.set_current_key("k")
        state.update({"ok": 1})
        with pytest.raises(SerializationError, match="'holder'.*lock"):
            state.update({"lock": threading.Lock()})
        assert state.value() == {"ok": 1}

    def test_registering_a_name_twice_with_another_type_fails(self, backend):
        backend.get_or_create_state(ValueStateDescriptor("x", int))
        assert backend.get_or_create_state(ValueStateDescriptor("x", int)) is backend.get_or_create_state(
            ValueStateDescriptor("x", Types.LONG())
        )
        with pytest.raises(StateDescriptorConflictError, match="'x'"):
            backend.get_or_create_state(ValueStateDescriptor("x", str))
        with pytest.raises(StateDescriptorConflictError, match="'x'"):
            backend.get_or_create_state(ListStateDescriptor("x", int))
        # what a snapshot would record: the first registration only
        assert backend.state_metadata() == [StateMetadata.of(ValueStateDescriptor("x", int))]


def test_every_backend_implements_exactly_the_interfaces_it_declares(backend):
    """KeyedStateBackend declares what every backend does; what RocksDB mode's store drives is its own interface
    (no backend has methods that only raise)."""
    from keyedstate.state.base import KeyedStateBackend
    from keyedstate.state.rocksdb import RocksDBKeyedStateBackend
    from keyedstate.state.rocksdb.recording import KeyGroupDatabases

    for method in ("export_records", "load_stored_records", "reset", "count_keys_with_state", "raw_column_names",
                   "prepare_snapshot", "state_metadata", "cleanup_expired_state"):
        assert callable(getattr(KeyedStateBackend, method)) and callable(getattr(backend, method))
    recorded = ("take_changes", "replay", "is_empty", "checkpoint")
    key_groups = ("open_key_group", "attach_key_group", "detach_key_group", "close_key_group", "start_recording",
                  "estimate_keys_with_state", "estimate_state_bytes")
    assert not any(hasattr(KeyedStateBackend, method) for method in recorded + key_groups)
    assert all(callable(getattr(KeyGroupDatabases, method)) for method in recorded + key_groups)
    assert all(hasattr(backend, method) for method in recorded) == isinstance(backend, RocksDBKeyedStateBackend)
    assert all(hasattr(backend, method) for method in key_groups) == isinstance(backend, KeyGroupDatabases)
    assert isinstance(backend, KeyGroupDatabases) == hasattr(backend, "attached")  # Spark's key-group backend
    if isinstance(backend, RocksDBKeyedStateBackend):
        assert isinstance(backend.take_changes(), ChangeLog)
