"""State schema evolution on Spark, both state backends (docs/operations.md, "State schema evolution"): a restart
whose function declares its states differently continues the stored values as the new types, drops removed states,
and a state registered again after a drop starts empty. Refusals are in tests/spark/test_restart_settings.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from keyedstate import KeyedProcessFunction, StateTtlConfig, Time, Types, ValueStateDescriptor
from keyedstate.spark import keyed_process
from tests.spark.test_restart_settings import Query, backend_options, rows, users_in_key_groups

pytestmark = [pytest.mark.spark, pytest.mark.slow]

OUTPUT = "user STRING, report STRING"
V1_ORDER = Types.ROW_NAMED(["id", "amount"], [Types.STRING(), Types.INT()])
V2_ORDER = Types.ROW_NAMED(["amount", "id", "currency"], [Types.LONG(), Types.STRING(), Types.STRING()],
                           defaults={"currency": "EUR"})


class Orders(KeyedProcessFunction):
    """v1: a count (INT), the last order (a named ROW), a note and a label (LONG). v2: the count widened to LONG,
    the order with a field added and its fields reordered, the label migrated to STRING and given a TTL, the note
    removed, a state added. v3: v2 with the note registered again. Each element reports what the states held, then
    updates them."""

    def __init__(self, version: int):
        self.version = version

    def open(self, runtime_context):
        v1 = self.version == 1
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT() if v1 else Types.LONG()))
        self.order = runtime_context.get_state(ValueStateDescriptor("order", V1_ORDER if v1 else V2_ORDER))
        label = ValueStateDescriptor("label", Types.LONG() if v1 else Types.STRING())
        if not v1:
            label.enable_state_migration(lambda old: f"#{old}")
            label.enable_time_to_live(StateTtlConfig.new_builder(Time.days(1)).build())
        self.label = runtime_context.get_state(label)
        self.note = (runtime_context.get_state(ValueStateDescriptor("note", Types.STRING()))
                     if self.version != 2 else None)
        self.added = (runtime_context.get_state(ValueStateDescriptor("added", Types.LONG()))
                      if not v1 else None)

    def process_element(self, value, ctx):
        report = {"count": self.count.value(), "order": self.order.value(), "label": self.label.value(),
                  "note": self.note.value() if self.note is not None else "-",
                  "added": self.added.value() if self.added is not None else "-"}
        yield value["user"], json.dumps(report, sort_keys=True)
        self.count.update((self.count.value() or 0) + 1)
        if self.version == 1:
            self.order.update({"id": f"o{value['n']}", "amount": value["n"] + 10})
            self.label.update(value["n"] + 100)
            self.note.update("old note")
        else:
            self.order.update({"amount": value["n"], "id": f"o{value['n']}", "currency": "USD"})
            self.added.update(1)


def run(query: Query, version: int, state: dict[str, Any]) -> None:
    output = keyed_process(query.source(), ["user"], Orders(version), OUTPUT, num_key_groups=4,
                           event_time_column="ts", **state)
    running = query._write(output)
    try:
        running.processAllAvailable()
    finally:
        running.stop()


def reports(query: Query) -> dict[str, list[dict]]:
    by_user: dict[str, list[dict]] = {}
    for path in sorted((query.base / "out").glob("part-*.json")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            by_user.setdefault(record["user"], []).append(json.loads(record["report"]))
    for reported in by_user.values():  # in batch order: each report comes before its count's increment
        reported.sort(key=lambda report: report["count"] or 0)
    return by_user


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_changed_declarations_continue_the_stored_state_and_a_dropped_state_comes_back_empty(
        spark, tmp_path: Path, backend: str):
    query = Query(spark, tmp_path)
    state = backend_options(backend, tmp_path)
    # two users in different key groups: bob's key group is not written by v2, so v3 finds the note v1 left there
    ann, bob = users_in_key_groups(4, lambda group: group == 0, 1) + users_in_key_groups(4, lambda g: g == 1, 1)
    query.add_input(rows([ann, bob], 1))
    run(query, 1, state)
    query.add_input(rows([ann], 2))
    run(query, 2, state)
    query.add_input(rows([ann, bob], 3))
    run(query, 3, state)

    by_user = reports(query)
    assert by_user[bob][1] == {"count": 1, "order": {"amount": 11, "id": "o1", "currency": "EUR"}, "label": "#101",
                               "note": None, "added": None}  # migrated in v3, its stale note never read
    ann = by_user[ann]
    assert len(ann) == 3
    assert ann[1] == {"count": 1, "order": {"amount": 10, "id": "o0", "currency": "EUR"}, "label": "#100",
                      "note": "-", "added": None}
    assert ann[2]["note"] is None  # dropped by v2, registered again by v3: it starts empty, not with "old note"
    assert ann[2]["count"] == 2 and ann[2]["added"] == 1 and ann[2]["label"] == "#100"
    assert ann[2]["order"] == {"amount": 0, "id": "o0", "currency": "USD"}
    # the drop is reported (a WARNING of the workers) and recorded, which gave v3's note a new incarnation
    settings = json.loads(next(Path(state["state_storage"]).rglob("query-settings.json")).read_text())
    assert [s["name"] for s in settings["dropped_states"]] == ["note"]
    assert {s["name"]: s.get("incarnation", 0) for s in settings["states"]}["note"] == 1
