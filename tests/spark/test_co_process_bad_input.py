"""keyed_co_process refuses inputs it cannot run correctly when it is called (not when the query starts), naming
both inputs' columns and the fix; an element callback that fails on Spark is named with its input."""

from __future__ import annotations

import re

import pytest
from pyspark.errors import StreamingQueryException

from keyedstate import KeyedCoProcessFunction, KeyedProcessFunction
from keyedstate.errors import ConfigurationError
from keyedstate.spark import keyed_co_process, keyed_process
from tests.spark.file_stream import write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ORDERS = "order_id STRING, region STRING, amount DOUBLE, ts TIMESTAMP"
PAYMENTS = "order BIGINT, region STRING, paid DOUBLE, ts TIMESTAMP"
OUTPUT = "order_id STRING, n BIGINT"


class Nothing(KeyedCoProcessFunction):
    def process_element1(self, value, ctx):
        return ()

    def process_element2(self, value, ctx):
        raise ValueError("cannot read this payment")


class OneInput(KeyedProcessFunction):
    def process_element(self, value, ctx):
        return ()


@pytest.fixture
def inputs(spark, tmp_path):
    for directory in ("orders", "payments"):
        (tmp_path / directory).mkdir()
    orders = spark.readStream.schema(ORDERS).json(str(tmp_path / "orders"))
    payments = spark.readStream.schema(PAYMENTS).json(str(tmp_path / "payments"))
    return orders.withWatermark("ts", "5 seconds"), payments.withWatermark("ts", "5 seconds"), payments


def test_key_columns_of_different_types_or_counts_are_refused_naming_both_lists(inputs):
    orders, payments, _ = inputs
    with pytest.raises(ConfigurationError, match=r"first_key_columns are \(order_id string\), second_key_columns "
                                                 r"are \(order bigint\)\. Cast"):
        keyed_co_process(orders, payments, ["order_id"], ["order"], Nothing(), OUTPUT, event_time_columns=("ts", "ts"))
    with pytest.raises(ConfigurationError, match=r"first_key_columns are \(order_id string, region string\), "
                                                 r"second_key_columns are \(region string\)"):
        keyed_co_process(orders, payments, ["order_id", "region"], ["region"], Nothing(), OUTPUT,
                         event_time_columns=("ts", "ts"))
    with pytest.raises(ConfigurationError, match=r"second_key_columns: key column\(s\) 'order_id' are not in"):
        keyed_co_process(orders, payments, ["order_id"], ["order_id"], Nothing(), OUTPUT,
                         event_time_columns=("ts", "ts"))


def test_event_time_needs_a_watermark_on_each_input_and_a_pair_of_columns(inputs):
    orders, _, unwatermarked_payments = inputs
    with pytest.raises(ConfigurationError, match=r"needs a watermark on the second input \(before keyed_co_process\)"
                                                 r".*withWatermark\('ts', '10 seconds'\)"):
        keyed_co_process(orders, unwatermarked_payments, ["region"], ["region"], Nothing(), OUTPUT,
                         event_time_columns=("ts", "ts"))
    with pytest.raises(ConfigurationError, match=r"needs event_time_columns=\(first_column, second_column\)"):
        keyed_co_process(orders, unwatermarked_payments, ["region"], ["region"], Nothing(), OUTPUT)
    with pytest.raises(ConfigurationError, match=r"event_time_columns must be a pair of column names"):
        keyed_co_process(orders, unwatermarked_payments, ["region"], ["region"], Nothing(), OUTPUT,
                         event_time_columns="ts")
    with pytest.raises(ConfigurationError,
                       match=r"event_time_columns\[1\] \(of the second input\) 'amount' has type double"):
        keyed_co_process(orders, orders, ["region"], ["region"], Nothing(), OUTPUT, event_time_columns=("ts", "amount"))
    # processing time needs neither
    keyed_co_process(orders, unwatermarked_payments, ["region"], ["region"], Nothing(), OUTPUT,
                     time_mode="processing_time")


def test_each_entry_point_points_to_the_other_for_the_other_kind_of_function(inputs):
    orders, payments, _ = inputs
    with pytest.raises(ConfigurationError, match=r"KeyedCoProcessFunction instance .* got OneInput; a "
                                                 r"KeyedProcessFunction runs with keyed_process"):
        keyed_co_process(orders, payments, ["region"], ["region"], OneInput(), OUTPUT, event_time_columns=("ts", "ts"))
    with pytest.raises(ConfigurationError, match=r"got Nothing; a KeyedCoProcessFunction runs with keyed_co_process"):
        keyed_process(orders, ["region"], Nothing(), OUTPUT, event_time_column="ts")


def test_an_input_that_is_not_a_dataframe_is_named(inputs):
    orders, _, _ = inputs
    with pytest.raises(ConfigurationError, match=r"the second input must be a DataFrame, got str"):
        keyed_co_process(orders, "payments", ["region"], ["region"], Nothing(), OUTPUT, event_time_columns=("ts", "ts"))


def test_a_failing_process_element2_is_named_with_its_key(spark, tmp_path):
    write_input(tmp_path / "orders", 0, [{"order_id": "o", "region": "eu", "amount": 1.0}])
    write_input(tmp_path / "payments", 0, [{"order": 1, "region": "eu", "paid": 1.0}])
    orders = spark.readStream.schema(ORDERS).json(str(tmp_path / "orders"))
    payments = spark.readStream.schema(PAYMENTS).json(str(tmp_path / "payments"))
    output = keyed_co_process(orders, payments, ["region"], ["region"], Nothing(), OUTPUT,
                              time_mode="processing_time", num_key_groups=3)
    query = (output.writeStream.format("memory").queryName("co_failure")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        with pytest.raises(StreamingQueryException) as failure:
            query.processAllAvailable()
    finally:
        query.stop()
    message = str(failure.value)
    assert "Nothing.process_element2 failed for key 'eu'" in message
    assert "ValueError: cannot read this payment" in message
    assert re.search(r"keyed_co_process key group \d, batch 0: ", message)
    assert "keyed_process key group" not in message
