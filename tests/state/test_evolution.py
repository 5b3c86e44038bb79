"""The entry conversions of state schema evolution, one stored entry at a time (the backends apply them per key
group; tests/testing/test_harness_state_evolution.py runs them through both backends)."""

from __future__ import annotations

import struct

import pytest
from pyspark.sql import Row

from keyedstate import ListStateDescriptor, MapStateDescriptor, StateTtlConfig, Time, Types, ValueStateDescriptor
from keyedstate.errors import StateTypeMismatchError
from keyedstate.serialization import DEFAULT_CODEC
from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.base.evolution import entry_migration, reads_as_is


def migrated(old_descriptor, new_descriptor, value, now: int = 0):
    migrate = entry_migration(StateMetadata.of(old_descriptor), new_descriptor, lambda: now)
    assert migrate is not None
    return migrate(DEFAULT_CODEC.serialize(value))


def test_a_pyspark_row_keeps_its_class_and_gets_the_new_field_order():
    old = ValueStateDescriptor("o", Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()]))
    new = ValueStateDescriptor("o", Types.ROW_NAMED(["b", "a", "c"], [Types.STRING(), Types.LONG(), Types.STRING()],
                                                    defaults={"c": "z"}))
    value = DEFAULT_CODEC.deserialize(migrated(old, new, Row(a=1, b="x")))
    assert isinstance(value, Row) and value == Row(b="x", a=1, c="z") and value.c == "z"


def test_nested_rows_in_a_list_type_gain_their_field():
    old = ValueStateDescriptor("o", Types.LIST(Types.ROW([Types.INT()])))
    new = ValueStateDescriptor("o", Types.LIST(Types.ROW([Types.LONG(), Types.BOOLEAN()], defaults={1: False})))
    assert DEFAULT_CODEC.deserialize(migrated(old, new, [(1,), (2,)])) == [(1, False), (2, False)]


def test_equal_declarations_and_pure_widenings_read_entries_as_they_are():
    long_value = ValueStateDescriptor("n", Types.LONG())
    assert entry_migration(StateMetadata.of(ValueStateDescriptor("n", Types.INT())), long_value, lambda: 0) is None
    assert entry_migration(StateMetadata.of(long_value), long_value, lambda: 0) is None


def test_reads_as_is_accepts_equal_and_wider_types_only():
    def signature(descriptor):
        return descriptor.type_signature()

    ints = signature(ValueStateDescriptor("n", Types.INT()))
    longs = signature(ValueStateDescriptor("n", Types.LONG()))
    assert reads_as_is(ints, longs) and reads_as_is(longs, longs)
    assert not reads_as_is(longs, ints)
    assert reads_as_is(signature(MapStateDescriptor("m", Types.INT(), Types.FLOAT())),
                       signature(MapStateDescriptor("m", Types.LONG(), Types.DOUBLE())))
    assert not reads_as_is(signature(ValueStateDescriptor("r", Types.ROW_NAMED(["a"], [Types.INT()]))),
                           signature(ValueStateDescriptor("r", Types.ROW_NAMED(["a", "b"], [Types.INT()] * 2))))
    assert not reads_as_is(ints, signature(ListStateDescriptor("n", Types.INT())))  # another kind
    assert not reads_as_is("value<INT", ints)  # unreadable


def test_ttl_turned_on_prefixes_the_migration_time_and_off_strips_it():
    plain = ListStateDescriptor("l", Types.STRING())
    with_ttl = ListStateDescriptor("l", Types.STRING())
    with_ttl.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(5)).build())
    entry = migrated(plain, with_ttl, "x", now=1234)
    assert struct.unpack(">q", entry[:8])[0] == 1234 and DEFAULT_CODEC.deserialize(entry[8:]) == "x"
    migrate_off = entry_migration(StateMetadata.of(with_ttl), plain, lambda: 0)
    assert migrate_off is not None and migrate_off(entry) == DEFAULT_CODEC.serialize("x")


def test_a_migration_returning_the_wrong_type_names_the_state_before_anything_reads_it():
    new = ValueStateDescriptor("total", Types.STRING())
    new.enable_state_migration(lambda old: old * 2)  # still an int
    with pytest.raises(StateTypeMismatchError, match="the migration of state 'total' produced a int value"):
        migrated(ValueStateDescriptor("total", Types.LONG()), new, 21)
