"""State schema evolution in the harness, both backends (docs/operations.md, "State schema evolution"): a snapshot
restored into a function whose state declarations changed reads the old values as the new type (Flink's "compatible
as is" and "compatible after migration"), drops removed states, and refuses what cannot be read, at restore."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from keyedstate import (
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    Time,
    Types,
    ValueStateDescriptor,
)
from keyedstate.errors import StateDescriptorConflictError, StateTypeMismatchError, UserFunctionError
from keyedstate.testing import KeyedProcessHarness

Declare = Callable[[], list]


class Keeper(KeyedProcessFunction):
    """Registers the declared states; an element ``{"user", "writes": {state name: value}}`` writes them (a list
    state gets the value added, a map state the items put) and the function yields nothing."""

    def __init__(self, declare: Declare):
        self.declare = declare

    def open(self, runtime_context):
        self.states = {}
        for descriptor in self.declare():
            getter = {ListStateDescriptor: runtime_context.get_list_state,
                      MapStateDescriptor: runtime_context.get_map_state}.get(type(descriptor),
                                                                             runtime_context.get_state)
            self.states[descriptor.name] = getter(descriptor)

    def process_element(self, value, ctx):
        for name, written in value["writes"].items():
            state = self.states[name]
            if hasattr(state, "put_all"):
                state.put_all(written)
            elif hasattr(state, "add"):
                state.add(written)
            else:
                state.update(written)
        return iter(())


def user(event: Any) -> str:
    return event["user"]


def written_then_restored(backend: str, old: Declare, writes: dict[str, Any], new: Declare, **restore: Any):
    """Write ``writes`` for user ann under ``old``, snapshot, restore under ``new``; returns the restored harness."""
    first = KeyedProcessHarness(Keeper(old), user, backend=backend).open()
    first.process_element({"user": "ann", "writes": writes})
    snapshot = first.snapshot()
    first.close()
    return KeyedProcessHarness.restore(Keeper(new), user, snapshot, backend=backend, **restore)


def read(harness: KeyedProcessHarness, name: str) -> Any:
    state = harness.state("ann", next(d for d in harness._function.declare() if d.name == name))
    if hasattr(state, "items"):
        return dict(state.items())
    return state.get() if hasattr(state, "add") else state.value()


def ttl(descriptor, seconds: int = 60):
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(seconds)).build())
    return descriptor


OLD_ROW = Types.ROW_NAMED(["id", "amount", "note"], [Types.STRING(), Types.INT(), Types.STRING()])


@pytest.mark.parametrize("new_row, stored, expected", [
    (Types.ROW_NAMED(["id", "amount", "note", "currency"], [Types.STRING(), Types.INT(), Types.STRING(),
                                                            Types.STRING()], defaults={"currency": "EUR"}),
     {"id": "a", "amount": 3, "note": "x"}, {"id": "a", "amount": 3, "note": "x", "currency": "EUR"}),
    (Types.ROW_NAMED(["id", "amount", "note", "flag"], [Types.STRING(), Types.INT(), Types.STRING(),
                                                        Types.BOOLEAN()]),
     ("a", 3, "x"), ("a", 3, "x", None)),
    (Types.ROW_NAMED(["note", "id"], [Types.STRING(), Types.STRING()]), ("a", 3, "x"), ("x", "a")),
    (Types.ROW_NAMED(["amount", "id"], [Types.LONG(), Types.STRING()]), {"id": "a", "amount": 3, "note": "x"},
     {"amount": 3, "id": "a"}),
], ids=["added-with-default", "added-null", "removed-and-reordered", "widened-field"])
def test_named_row_fields_evolve_in_place(backend_kind, new_row, stored, expected):
    harness = written_then_restored(backend_kind, lambda: [ValueStateDescriptor("order", OLD_ROW)],
                                    {"order": stored}, lambda: [ValueStateDescriptor("order", new_row)])
    assert read(harness, "order") == expected
    snapshot = harness.snapshot()  # written in the new layout: a second restore reads it as it is
    harness.close()
    again = KeyedProcessHarness.restore(Keeper(lambda: [ValueStateDescriptor("order", new_row)]), user, snapshot,
                                        backend=backend_kind)
    assert read(again, "order") == expected
    again.close()


def test_rows_evolve_inside_list_and_map_states(backend_kind):
    old_row = Types.ROW([Types.INT()])
    new_row = Types.ROW([Types.LONG(), Types.STRING()], defaults={1: "-"})
    harness = written_then_restored(
        backend_kind,
        lambda: [ListStateDescriptor("rows", old_row), MapStateDescriptor("by_kind", Types.STRING(), old_row)],
        {"rows": (1,), "by_kind": {"k": (2,)}},
        lambda: [ListStateDescriptor("rows", new_row), MapStateDescriptor("by_kind", Types.STRING(), new_row)])
    assert read(harness, "rows") == [(1, "-")]
    assert read(harness, "by_kind") == {"k": (2, "-")}
    harness.close()


def test_ttl_turned_on_counts_old_entries_as_written_at_restore_and_turned_off_keeps_them(backend_kind):
    on = written_then_restored(backend_kind, lambda: [ValueStateDescriptor("seen", Types.LONG())], {"seen": 7},
                               lambda: [ttl(ValueStateDescriptor("seen", Types.LONG()))])
    on.set_processing_time(59_000)
    assert read(on, "seen") == 7
    on.set_processing_time(60_000)  # last access = restore time 0, ttl 60 s
    assert read(on, "seen") is None
    on.close()

    off = written_then_restored(backend_kind, lambda: [ttl(ValueStateDescriptor("seen", Types.LONG()))],
                                {"seen": 7}, lambda: [ValueStateDescriptor("seen", Types.LONG())])
    off.set_processing_time(10**9)
    assert read(off, "seen") == 7
    off.close()


def test_a_declared_migration_converts_every_stored_value(backend_kind):
    def new():
        value = ValueStateDescriptor("total", Types.STRING())
        value.enable_state_migration(lambda old: f"{old} EUR")
        items = ListStateDescriptor("items", Types.STRING())
        items.enable_state_migration(str)
        prices = MapStateDescriptor("prices", Types.STRING(), Types.DOUBLE())
        prices.enable_state_migration(lambda cents: cents / 100)
        return [value, items, prices]

    harness = written_then_restored(
        backend_kind,
        lambda: [ValueStateDescriptor("total", Types.LONG()), ListStateDescriptor("items", Types.INT()),
                 MapStateDescriptor("prices", Types.STRING(), Types.LONG())],
        {"total": 12, "items": 5, "prices": {"tea": 250}}, new)
    assert (read(harness, "total"), read(harness, "items"), read(harness, "prices")) == (
        "12 EUR", ["5"], {"tea": 2.5})
    harness.close()


def test_a_removed_state_is_dropped_and_registered_again_starts_empty(backend_kind):
    def both():
        return [ValueStateDescriptor("count", Types.LONG()), ValueStateDescriptor("old", Types.STRING())]

    harness = written_then_restored(backend_kind, both, {"count": 1, "old": "stale"},
                                    lambda: [ValueStateDescriptor("count", Types.LONG())])
    without = harness.snapshot()
    harness.close()
    if backend_kind == "heap":
        from keyedstate.state.key_groups.row_format import StateRow, decode_state_payload
        names = {metadata["name"] for row in without.rows.values()
                 for metadata, _ in decode_state_payload(StateRow.from_row(row).state)}
        assert names == {"count"}  # the bytes of the removed state are gone from the snapshot
    again = KeyedProcessHarness.restore(Keeper(both), user, without, backend=backend_kind)
    assert read(again, "count") == 1 and read(again, "old") is None
    again.close()


@pytest.mark.parametrize("old, new, expected", [
    (lambda: ValueStateDescriptor("s", Types.LONG()), lambda: ValueStateDescriptor("s", Types.STRING()),
     "stored with type value<LONG> but is now registered with type value<STRING> (LONG does not widen to STRING)"),
    (lambda: ValueStateDescriptor("s", Types.ROW([Types.INT(), Types.INT()])),
     lambda: ValueStateDescriptor("s", Types.ROW([Types.INT()])), "only named rows can remove fields"),
    (lambda: ValueStateDescriptor("s", OLD_ROW),
     lambda: ValueStateDescriptor("s", Types.ROW_NAMED(["id"], [Types.INT()])), "field id: STRING does not widen"),
], ids=["type", "positional-field-removed", "field-type"])
def test_an_unreadable_type_change_is_refused_at_restore_naming_the_fixes(backend_kind, old, new, expected):
    first = KeyedProcessHarness(Keeper(lambda: [old()]), user, backend=backend_kind).open()
    stored = {"LONG": 1, "ROW<INT,INT>": (1, 2)}.get(old().type_info.name, ("a", 1, "x"))
    first.process_element({"user": "ann", "writes": {"s": stored}})
    snapshot = first.snapshot()
    first.close()
    with pytest.raises(UserFunctionError) as raised:  # raised by get_state in open(): before any element
        KeyedProcessHarness.restore(Keeper(lambda: [new()]), user, snapshot, backend=backend_kind)
    assert isinstance(raised.value.__cause__, StateTypeMismatchError)
    message = str(raised.value)
    assert expected in message
    assert "enable_state_migration" in message and "bootstrap_keyed_state" in message and "wider" in message


def test_a_kind_change_is_refused_even_with_a_migration(backend_kind):
    def as_list():
        descriptor = ListStateDescriptor("s", Types.LONG())
        descriptor.enable_state_migration(lambda old: old)
        return [descriptor]

    first = KeyedProcessHarness(Keeper(lambda: [ValueStateDescriptor("s", Types.LONG())]), user,
                                backend=backend_kind).open()
    first.process_element({"user": "ann", "writes": {"s": 1}})
    snapshot = first.snapshot()
    first.close()
    with pytest.raises(UserFunctionError, match="stored as value state but is now registered as list") as raised:
        KeyedProcessHarness.restore(Keeper(as_list), user, snapshot, backend=backend_kind)
    assert isinstance(raised.value.__cause__, StateDescriptorConflictError)
