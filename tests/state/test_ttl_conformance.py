"""State time-to-live behaves the same for every primitive on every backend (semantics.md item 12)."""

from __future__ import annotations

from keyedstate import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from tests.state.sample_descriptors import TTL_MS, Average, with_ttl

# ---- TTL (semantics.md item 12) ----------------------------------------------------------------------------------


class TestTtl:
    def test_value_expires_exactly_when_last_access_plus_ttl_reaches_now(self, backend, clock):
        state = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v", int)))
        backend.set_current_key("k")
        state.update(1)
        clock.advance(TTL_MS - 1)
        assert state.value() == 1
        clock.advance(1)
        assert state.value() is None

    def test_on_create_and_write_does_not_refresh_on_read(self, backend, clock):
        state = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v", int)))
        backend.set_current_key("k")
        state.update(1)
        clock.advance(TTL_MS - 10)
        assert state.value() == 1
        clock.advance(10)
        assert state.value() is None

    def test_writes_refresh_the_timestamp(self, backend, clock):
        state = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v", int)))
        backend.set_current_key("k")
        state.update(1)
        clock.advance(TTL_MS - 10)
        state.update(2)
        clock.advance(TTL_MS - 10)
        assert state.value() == 2

    def test_on_read_and_write_refreshes_on_read(self, backend, clock):
        state = backend.get_or_create_state(
            with_ttl(ValueStateDescriptor("v", int), update=StateTtlConfig.UpdateType.OnReadAndWrite)
        )
        backend.set_current_key("k")
        state.update(1)
        clock.advance(TTL_MS - 10)
        assert state.value() == 1
        clock.advance(TTL_MS - 10)
        assert state.value() == 1
        clock.advance(TTL_MS)
        assert state.value() is None

    def test_return_expired_if_not_cleaned_up_returns_it_once_then_it_is_gone(self, backend, clock):
        state = backend.get_or_create_state(
            with_ttl(
                ValueStateDescriptor("v", int),
                visibility=StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp,
            )
        )
        backend.set_current_key("k")
        state.update(1)
        clock.advance(TTL_MS)
        assert state.value() == 1  # expired but still stored
        assert state.value() is None  # reading it cleared it

    def test_reading_an_expired_value_removes_it_from_storage(self, backend, clock):
        state = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v", int)))
        backend.set_current_key("k")
        state.update(1)
        clock.advance(TTL_MS)
        assert list(backend.iter_stored_records("v")) != []
        assert state.value() is None
        assert list(backend.iter_stored_records("v")) == []

    def test_list_state_expires_per_element(self, backend, clock):
        state = backend.get_or_create_state(with_ttl(ListStateDescriptor("l", int)))
        backend.set_current_key("k")
        state.add(1)
        clock.advance(TTL_MS // 2)
        state.add(2)
        clock.advance(TTL_MS // 2)
        assert state.get() == [2]
        clock.advance(TTL_MS // 2)
        assert state.get() == []

    def test_list_state_on_read_and_write_refreshes_every_element_read(self, backend, clock):
        state = backend.get_or_create_state(
            with_ttl(ListStateDescriptor("l", int), update=StateTtlConfig.UpdateType.OnReadAndWrite)
        )
        backend.set_current_key("k")
        state.add_all([1, 2])
        clock.advance(TTL_MS - 1)
        assert state.get() == [1, 2]
        clock.advance(TTL_MS - 1)
        assert state.get() == [1, 2]

    def test_map_state_expires_per_map_key(self, backend, clock):
        state = backend.get_or_create_state(with_ttl(MapStateDescriptor("m", str, int)))
        backend.set_current_key("k")
        state.put("old", 1)
        clock.advance(TTL_MS // 2)
        state.put("new", 2)
        clock.advance(TTL_MS // 2)
        assert state.get("old") is None
        assert not state.contains("old")
        assert dict(state.items()) == {"new": 2}
        assert not state.is_empty()
        clock.advance(TTL_MS)
        assert state.is_empty()

    def test_map_state_return_expired_if_not_cleaned_up(self, backend, clock):
        state = backend.get_or_create_state(
            with_ttl(
                MapStateDescriptor("m", str, int),
                visibility=StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp,
            )
        )
        backend.set_current_key("k")
        state.put("a", 1)
        clock.advance(TTL_MS)
        assert state.get("a") == 1
        assert state.get("a") is None

    def test_reducing_and_aggregating_state_expire(self, backend, clock):
        summed = backend.get_or_create_state(with_ttl(ReducingStateDescriptor("s", lambda a, b: a + b, int)))
        average = backend.get_or_create_state(with_ttl(AggregatingStateDescriptor("a", Average(), tuple)))
        backend.set_current_key("k")
        summed.add(1)
        average.add(10)
        clock.advance(TTL_MS)
        assert summed.get() is None
        assert average.get() is None
        summed.add(5)  # starts over instead of adding to the expired sum
        assert summed.get() == 5

    def test_cleanup_removes_expired_state_that_is_never_read_again(self, backend, clock):
        value = backend.get_or_create_state(with_ttl(ValueStateDescriptor("v", int)))
        items = backend.get_or_create_state(with_ttl(ListStateDescriptor("l", int)))
        entries = backend.get_or_create_state(with_ttl(MapStateDescriptor("m", str, int)))
        for key in range(50):
            backend.set_current_key(key)
            value.update(key)
            items.add(key)
            entries.put("x", key)
        clock.advance(TTL_MS // 2)
        backend.set_current_key(0)
        value.update(0)  # one fresh entry survives
        clock.advance(TTL_MS // 2)
        removed = backend.cleanup_expired_state()
        assert removed == 49 + 50 + 50
        assert len(list(backend.iter_stored_records("v"))) == 1
        assert list(backend.iter_stored_records("l")) == []
        assert list(backend.iter_stored_records("m")) == []
