"""Every backend exports, loads, counts and resets a key group's records the same way (the save/restore step of
Spark's row mode, declared on KeyedStateBackend)."""

from __future__ import annotations

import pytest

from keyedstate import ListStateDescriptor, MapStateDescriptor, StateTtlConfig, Time, Types, ValueStateDescriptor
from keyedstate.errors import StateTypeMismatchError
from tests.state.conftest import BACKEND_KINDS


def descriptors():
    ttl = ValueStateDescriptor("seen", Types.STRING())
    ttl.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(60)).build())
    return [ValueStateDescriptor("count", Types.LONG()), ListStateDescriptor("events", Types.STRING()),
            MapStateDescriptor("kinds", Types.STRING(), Types.LONG()), ttl]


def fill(backend) -> None:
    count, events, kinds, seen = [backend.get_or_create_state(d) for d in descriptors()]
    for index, key in enumerate(["alice", "bob", ("carol", 7)]):
        backend.set_current_key(key)
        count.update(index)
        events.add_all([f"e{index}", "x"])
        kinds.put_all({"a": index, "b": 2})
        seen.update("now")
    backend.set_current_key("only-a-count")
    count.update(99)


def canonical(exported) -> list:
    return sorted((metadata.name, sorted(records)) for metadata, records in exported)


@pytest.mark.parametrize("target_kind", BACKEND_KINDS)
def test_exported_records_load_into_any_backend_unchanged(backend, backend_factory, target_kind):
    fill(backend)
    exported = backend.export_records()
    assert {metadata.name for metadata, _ in exported} == {"count", "events", "kinds", "seen"}
    target = backend_factory(target_kind)
    for metadata, records in exported:
        target.load_stored_records(metadata, records)
    assert canonical(target.export_records()) == canonical(exported)
    count = target.get_or_create_state(descriptors()[0])  # registered after loading: the records are found
    target.set_current_key("only-a-count")
    assert count.value() == 99
    assert target.count_keys_with_state() == backend.count_keys_with_state() == 4


def test_reset_drops_every_record_but_keeps_registrations(backend):
    fill(backend)
    backend.reset()
    assert backend.export_records() == [] and backend.count_keys_with_state() == 0
    events = backend.get_or_create_state(descriptors()[1])
    backend.set_current_key("alice")
    events.add("fresh")
    assert events.get() == ["fresh"]  # no sequence remembered from before the reset


def test_loading_records_of_another_type_is_refused_by_name(backend, backend_factory):
    fill(backend)
    metadata, records = next((m, r) for m, r in backend.export_records() if m.name == "count")
    target = backend_factory("heap")
    target.get_or_create_state(ValueStateDescriptor("count", Types.STRING()))
    with pytest.raises(StateTypeMismatchError, match="'count' was stored with type"):
        target.load_stored_records(metadata, records)


@pytest.mark.parametrize("target_kind", BACKEND_KINDS)
@pytest.mark.parametrize("old, new, value", [(Types.INT(), Types.LONG(), 7), (Types.FLOAT(), Types.DOUBLE(), 0.5),
                                             (Types.SHORT(), Types.BIG_INT(), -3)])
def test_records_load_under_a_wider_declared_type_unchanged(backend, backend_factory, target_kind, old, new, value):
    stored = backend.get_or_create_state(ValueStateDescriptor("amount", old))
    backend.set_current_key("alice")
    stored.update(value)
    target = backend_factory(target_kind)
    widened = target.get_or_create_state(ValueStateDescriptor("amount", new))
    for metadata, records in backend.export_records():
        target.load_stored_records(metadata, records)
    target.set_current_key("alice")
    assert widened.value() == value


def test_a_narrower_declared_type_is_refused_naming_the_widenings(backend, backend_factory):
    stored = backend.get_or_create_state(ValueStateDescriptor("amount", Types.LONG()))
    backend.set_current_key("alice")
    stored.update(7)
    target = backend_factory("heap")
    target.get_or_create_state(ValueStateDescriptor("amount", Types.INT()))
    metadata, records = backend.export_records()[0]
    with pytest.raises(StateTypeMismatchError, match=r"stored with type value<LONG> but is now registered with type "
                                                     r"value<INT> \(LONG does not widen to INT\): keep the old type "
                                                     r"or a compatible one \(a wider number type"):
        target.load_stored_records(metadata, records)
