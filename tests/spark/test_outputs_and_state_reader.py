"""One query that uses every output keyed_process has (main output, a side output, the metrics side output), then
reads its state back with read_keyed_state: on every supported Spark (3.5 reads the state store through Spark's
own classes, 4.x through the state data source) and through Spark Connect (the compatibility job runs this module
with a remote session)."""

from __future__ import annotations

import datetime as dt

import pytest

from keyedstate import KeyedProcessFunction, ListStateDescriptor, OutputTag, Types, ValueStateDescriptor
from keyedstate.spark import METRICS_TAG, main_output, read_keyed_state, side_output
from tests.spark.file_stream import start_query, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
SCHEMA = "user STRING, amount BIGINT, ts TIMESTAMP"
OUTPUT = "user STRING, count BIGINT"
LARGE = OutputTag("large")
BATCHES = [
    [{"user": "a", "amount": 5, "ts": T0}, {"user": "b", "amount": 50, "ts": T0 + 1}],
    [{"user": "a", "amount": 70, "ts": T0 + 2}, {"user": "c", "amount": 1, "ts": T0 + 3}],
    [{"user": "a", "amount": 2, "ts": T0 + 4}],
]


class CountAndFlagLarge(KeyedProcessFunction):
    """Counts and lists each user's amounts; large amounts also go to the side output; a timer an hour ahead."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.amounts = runtime_context.get_list_state(ListStateDescriptor("amounts", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        self.amounts.add(value["amount"])
        ctx.timer_service().register_event_time_timer(T0 + 3_600_000)
        if value["amount"] > 10:
            yield LARGE, (value["user"], value["amount"])
        yield value["user"], count


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def test_main_side_and_metrics_outputs_and_the_state_read_back(spark, tmp_path, state_store_provider):
    name = f"outputs_{state_store_provider.rsplit('.', 1)[-1]}"
    write_input(tmp_path / "in", 0, [dict(row, ts=iso(row["ts"])) for row in BATCHES[0]])
    query = start_query(spark, tmp_path, CountAndFlagLarge(), schema=SCHEMA, key_columns=["user"],
                        output_schema=OUTPUT, query_name=name, side_outputs={"large": "user STRING, amount BIGINT"},
                        emit_metrics=True)
    try:
        query.processAllAvailable()
        for index, rows in enumerate(BATCHES[1:], start=1):
            write_input(tmp_path / "in", index, [dict(row, ts=iso(row["ts"])) for row in rows])
            query.processAllAvailable()
    finally:
        query.stop()

    output = spark.table(name)
    assert sorted(tuple(r) for r in main_output(output, OUTPUT).collect()) == [
        ("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1)]
    assert sorted(tuple(r) for r in side_output(output, "large").collect()) == [("a", 70), ("b", 50)]
    metrics = side_output(output, METRICS_TAG).collect()
    assert sum(r.elements for r in metrics) == 5
    assert max(r.keys_with_state for r in metrics) >= 1 and all(r.state_bytes > 0 for r in metrics)

    timer = [("event_time", T0 + 3_600_000)]
    checkpoint = str(tmp_path / "checkpoint")
    assert read_keyed_state(spark, checkpoint) == {
        "a": {"count": 3, "amounts": [5, 70, 2], "__timers__": timer},
        "b": {"count": 1, "amounts": [50], "__timers__": timer},
        "c": {"count": 1, "amounts": [1], "__timers__": timer},
    }
    assert read_keyed_state(spark, checkpoint, batch_id=0) == {
        "a": {"count": 1, "amounts": [5], "__timers__": timer},
        "b": {"count": 1, "amounts": [50], "__timers__": timer},
    }
