"""keyed_co_process on Spark gives exactly what KeyedCoProcessHarness gives for the same micro-batches (the harness
is the oracle): the order/payment example over two file sources, late elements and timers on both inputs, side
outputs and metrics, both state backends and several key-group counts; the watermark is the minimum of both
inputs'; processing-time mode shares state and fires processing-time timers too."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Optional

import pytest
from pyspark.sql import Row

from examples.order_payments import LATE, LATE_SCHEMA, OUTPUT_SCHEMA, OrderPaymentMatcher
from keyedstate import KeyedCoProcessFunction, Types, ValueStateDescriptor
from keyedstate.spark import METRICS_TAG, keyed_co_process, main_output, side_output
from keyedstate.testing import KeyedCoProcessHarness
from tests.spark.file_stream import SparkBatch, read_batches, wait_until, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ORDERS = "order_id STRING, amount DOUBLE, ts TIMESTAMP"
PAYMENTS = "order STRING, paid DOUBLE, ts TIMESTAMP"
START_MS = int(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)


def order(order_id: str, amount: float, second: int) -> dict:
    return {"order_id": order_id, "amount": amount, "ts": _iso(second)}


def payment(order_id: str, paid: float, second: int) -> dict:
    return {"order": order_id, "paid": paid, "ts": _iso(second)}


def _iso(second: int) -> str:
    return dt.datetime.fromtimestamp(START_MS / 1000 + second, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _millis(row: dict) -> int:
    return int(dt.datetime.fromisoformat(row["ts"].replace("Z", "+00:00")).timestamp() * 1000)


# (orders, payments) per step; seconds after START. Watermarks lag by 0 s, so each input's watermark is the latest
# event time it has delivered, and the query's is the smaller of the two.
STEPS = [
    ([order("P", 1.0, 1)], []),  # only orders have data: the watermark waits for payments
    ([order("A", 10.0, 0), order("B", 20.0, 5), order("C", 30.0, 10)], [payment("A", 10.0, 8), payment("X", 5.0, 12)]),
    ([order("D", 40.0, 40), order("F", 60.0, 2)],  # F is late and has no payment: late side output
     [payment("B", 20.0, 42), payment("E", 50.0, 45)]),
    ([order("G", 70.0, 80), order("E", 50.0, 20)], []),  # E is late but its payment waits: matched
    ([], [payment("G", 70.0, 85), payment("H", 5.0, 90), payment("K", 9.0, 30)]),  # K: late payment, no order
    ([order("Z", 1.0, 3600)], [payment("Z", 1.0, 3601)]),  # moves both watermarks past every deadline
]


def _row(values: dict, schema: str) -> Row:
    names = [column.split()[0] for column in schema.split(", ")]
    fields = {name: values[name] for name in names}
    fields["ts"] = dt.datetime.fromtimestamp(_millis(values) / 1000)  # Spark hands out naive local datetimes
    return Row(**fields)


def run_on_spark(spark, base: Path, query_name: str, restart_before_step: Optional[int] = None,
                 **options) -> tuple[list, list, list, list[SparkBatch]]:
    """Run STEPS through keyed_co_process, one step per processAllAvailable; with ``restart_before_step``, stop the
    query there and start a new one (a new function instance) from the same checkpoint."""
    def source(directory: str, schema: str):
        return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(base / directory))
                .withWatermark("ts", "0 seconds"))

    def start():
        output = keyed_co_process(
            source("orders", ORDERS), source("payments", PAYMENTS), ["order_id"], ["order"], OrderPaymentMatcher(),
            OUTPUT_SCHEMA, event_time_columns=("ts", "ts"), side_outputs={LATE.tag_id: LATE_SCHEMA},
            emit_metrics=True, **options,
        )
        writer = output.writeStream.option("checkpointLocation", str(base / "checkpoint"))
        if restart_before_step is None:
            writer = writer.format("memory").queryName(query_name)
        else:  # the memory sink cannot restart from a checkpoint
            writer = writer.format("json").option("path", str(base / "out"))
        return output.schema, writer.start()

    for directory in ("orders", "payments"):
        (base / directory).mkdir(parents=True)
    schema, query = start()
    try:
        for index, (orders, payments) in enumerate(STEPS):
            if index == restart_before_step:
                query.stop()
                schema, query = start()
            write_input(base / "orders", index, orders)
            write_input(base / "payments", index, payments)
            query.processAllAvailable()
    finally:
        query.stop()
    if restart_before_step is None:
        table = spark.table(query_name)
    else:
        table = spark.read.schema(schema).json(str(base / "out"))
    rows = lambda frame: sorted(tuple(row) for row in frame.collect())  # noqa: E731
    return (rows(main_output(table, OUTPUT_SCHEMA)), rows(side_output(table, LATE.tag_id)),
            side_output(table, METRICS_TAG).collect(), read_batches(base / "checkpoint"))


def replay_in_harness(batches: list[SparkBatch], drop_late_events: bool = False) -> tuple[list, list]:
    """Per batch, as the Spark group function does: the batch's watermark (on both inputs) and processing time, then
    each key's elements of both inputs in event-time order (without those at or before the watermark when Spark
    drops late events)."""
    harness = KeyedCoProcessHarness(OrderPaymentMatcher(), lambda o: o["order_id"], lambda p: p["order"]).open()
    for batch in batches:
        harness.process_watermark(batch.watermark)
        harness.set_processing_time(batch.timestamp)
        elements = [(row["order_id"], _millis(row), 1, _row(row, ORDERS))
                    for index in batch.files_by_source[0] for row in STEPS[index][0]]
        elements += [(row["order"], _millis(row), 2, _row(row, PAYMENTS))
                     for index in batch.files_by_source[1] for row in STEPS[index][1]]
        if drop_late_events:
            elements = [element for element in elements if element[1] > batch.watermark]
        for _, timestamp, input_number, value in sorted(elements, key=lambda e: e[:2]):
            process = harness.process_element1 if input_number == 1 else harness.process_element2
            process(value, timestamp)
        harness.set_processing_time(batch.timestamp)
    main = sorted(tuple(record) for record in harness.extract_output())
    late = sorted(tuple(record) for record in harness.side_output(LATE))
    harness.close()
    return main, late


@pytest.mark.parametrize("num_key_groups,backend", [(1, "heap"), (7, "rocksdb"), (128, "heap"), (128, "rocksdb")])
def test_order_payments_on_spark_equals_the_harness(spark, tmp_path, num_key_groups, backend):
    options = {"state_backend": backend}
    if backend == "rocksdb":
        options.update(state_storage=str(tmp_path / "state-storage"), state_local_dir=str(tmp_path / "local"))
    query_name = f"orders_{num_key_groups}_{backend}_{int(time.time() * 1000) % 10**6}"
    main, late, metrics, batches = run_on_spark(spark, tmp_path, query_name, num_key_groups=num_key_groups,
                                                **options)

    expected_main, expected_late = replay_in_harness(batches)
    assert main == expected_main
    assert late == expected_late
    # The batches Spark ran exercise what the example is about: matches, timeouts of both inputs, late elements of
    # both inputs, and a late element that still finds its counterpart.
    outcomes = {(record[0], record[1]) for record in main}
    assert {("A", "paid"), ("B", "paid"), ("G", "paid"), ("Z", "paid")} <= outcomes
    assert {("C", "unpaid"), ("D", "unpaid"), ("P", "unpaid"), ("X", "unexpected_payment"),
            ("H", "unexpected_payment")} <= outcomes
    assert {record[1] for record in late} == {"order", "payment"}
    elements = sum(len(orders) + len(payments) for orders, payments in STEPS)
    assert sum(row["elements"] for row in metrics) == elements
    assert sum(row["timers_fired"] for row in metrics) == 5  # C, D, P, X, H


def test_a_restarted_query_continues_with_the_state_and_timers_of_both_inputs(spark, tmp_path):
    """Stopped after C's and X's deadlines were registered (from orders and from payments) and E's payment started
    waiting; the new query matches E's late order and fires those deadlines from the checkpointed state."""
    options = {"state_backend": "rocksdb", "state_storage": str(tmp_path / "state-storage"),
               "state_local_dir": str(tmp_path / "local")}
    main, late, _, batches = run_on_spark(spark, tmp_path, "restarted", restart_before_step=3, num_key_groups=7,
                                          **options)
    assert (main, late) == replay_in_harness(batches)
    assert {("E", "paid"), ("C", "unpaid"), ("X", "unexpected_payment")} <= {(r[0], r[1]) for r in main}


def test_the_watermark_is_the_minimum_of_both_inputs(spark, tmp_path):
    """Orders run ahead to 80 s while payments stay at 45 s: no deadline before 80 s fires until payments catch
    up (Spark's default multipleWatermarkPolicy, as Flink's two-input operators). Before payments have any data,
    orders alone do not move it (Flink waits for both inputs' first watermarks too)."""
    # Grouped by the user key itself (num_key_groups=None), the other grouping keyed_co_process offers.
    main, late, _, batches = run_on_spark(spark, tmp_path, f"wm_{int(time.time() * 1000) % 10**6}",
                                          num_key_groups=None)
    assert (main, late) == replay_in_harness(batches)
    only_orders = next(index for index, batch in enumerate(batches) if batch.files_by_source[0] == [0])
    assert batches[only_orders + 1].watermark == 0  # P's order at 1 s, no payment yet: no watermark
    seen = [batch.watermark - START_MS for batch in batches if batch.watermark > 0]
    assert 45_000 in seen  # orders at 80 s, payments at 45 s
    assert 80_000 in seen  # payments at 90 s, orders at 80 s
    assert all(watermark <= 80_000 or watermark >= 3_600_000 for watermark in seen)


def test_drop_late_events_lets_spark_drop_late_elements_of_both_inputs(spark, tmp_path):
    main, late, _, batches = run_on_spark(spark, tmp_path, f"drop_{int(time.time() * 1000) % 10**6}",
                                          num_key_groups=7, drop_late_events=True)
    assert (main, late) == replay_in_harness(batches, drop_late_events=True)
    assert late == []  # F (an order) and K (a payment) never reach the function
    assert ("E", "unexpected_payment", None, 50.0) in main  # E's late order was dropped too


class ProcessingTimeJoin(KeyedCoProcessFunction):
    """An order remembers its amount and sets a processing-time timer; a payment reads the amount its order left."""

    def open(self, runtime_context):
        self.amount = runtime_context.get_state(ValueStateDescriptor("amount", Types.DOUBLE()))

    def process_element1(self, order, ctx):
        self.amount.update(order["amount"])
        ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 1)
        yield ctx.get_current_key(), "order", order["amount"]

    def process_element2(self, payment, ctx):
        yield ctx.get_current_key(), "payment", self.amount.value()

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), ctx.time_domain().name, self.amount.value()


def test_processing_time_mode_shares_state_and_fires_processing_time_timers(spark, tmp_path):
    for directory in ("orders", "payments"):
        (tmp_path / directory).mkdir()
    orders = spark.readStream.schema(ORDERS).json(str(tmp_path / "orders"))
    payments = spark.readStream.schema(PAYMENTS).json(str(tmp_path / "payments"))
    output = keyed_co_process(orders, payments, ["order_id"], ["order"], ProcessingTimeJoin(),
                              "order_id STRING, what STRING, amount DOUBLE", time_mode="processing_time",
                              num_key_groups=7)
    name = f"proc_{int(time.time() * 1000) % 10**6}"
    query = (output.writeStream.format("memory").queryName(name).trigger(processingTime="300 milliseconds")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    rows = lambda: sorted(tuple(row) for row in spark.table(name).collect())  # noqa: E731
    try:
        write_input(tmp_path / "orders", 0, [order("o1", 1.0, 0)])
        wait_until(lambda: ("o1", "order", 1.0) in rows(), 180, "the order")
        write_input(tmp_path / "payments", 0, [payment("o1", 1.0, 0)])
        wait_until(lambda: len(rows()) >= 3, 180, "the payment and the timer")
    finally:
        query.stop()
    assert rows() == [("o1", "PROCESSING_TIME", 1.0), ("o1", "order", 1.0), ("o1", "payment", 1.0)]
