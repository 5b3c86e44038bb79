"""Mistakes new users make, each answered by an error that names the problem and the fix (not Spark's stack trace)."""

from __future__ import annotations

import sys
import textwrap
import threading

import pytest

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.errors import ConfigurationError, FunctionShippingError
from keyedstate.spark import keyed_process
from tests.spark.test_bad_input import SCHEMA, run_until_failure

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROW = {"user": "a", "payload": "x", "ts": "2024-01-01T00:00:00Z"}


class Count(KeyedProcessFunction):
    def __init__(self, bad_output: bool = False):
        self.bad_output = bad_output

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value["user"], "not a number" if self.bad_output else count


class HoldsALock(Count):
    def __init__(self):
        super().__init__()
        self.guard = threading.Lock()


class ReturnsATuple(KeyedProcessFunction):
    def process_element(self, value, ctx):
        return value["user"], 1


def test_a_function_attribute_that_cannot_be_pickled_is_named_before_the_query_starts(spark, tmp_path):
    frame = spark.readStream.schema(SCHEMA).json(str(tmp_path)).withWatermark("ts", "0 seconds")
    with pytest.raises(FunctionShippingError) as failure:
        keyed_process(frame, ["user"], HoldsALock(), "user STRING, count BIGINT", event_time_column="ts")
    message = str(failure.value)
    assert "HoldsALock" in message and "'guard'" in message and "_thread.lock" in message
    assert "open(runtime_context)" in message


def test_a_function_class_the_workers_cannot_import_fails_with_our_error_naming_class_module_and_fix(
        spark, tmp_path, monkeypatch):
    module_dir = tmp_path / "driver_only"
    module_dir.mkdir()
    (module_dir / "only_on_the_driver.py").write_text(textwrap.dedent("""
        from keyedstate import KeyedProcessFunction

        class DriverOnly(KeyedProcessFunction):
            def process_element(self, value, ctx):
                yield value["user"], 1
    """))
    monkeypatch.syspath_prepend(str(module_dir))  # the driver can import it; Spark's workers cannot
    from only_on_the_driver import DriverOnly  # type: ignore[import-not-found]

    try:
        message = run_until_failure(spark, tmp_path, DriverOnly(), [ROW], "not_importable")
    finally:
        sys.modules.pop("only_on_the_driver", None)
    assert "FunctionShippingError" in message and "DriverOnly" in message and "'only_on_the_driver'" in message
    assert "register_pickle_by_value" in message and "addPyFile" in message


def test_returning_a_tuple_instead_of_yielding_says_to_yield(spark, tmp_path):
    message = run_until_failure(spark, tmp_path, ReturnsATuple(), [ROW], "returns_tuple")
    assert "InvalidOutputError" in message and "ReturnsATuple.process_element returned the tuple ('a', 1)" in message
    assert "yield 'a', 1" in message


def test_event_time_without_a_watermark_is_refused_by_keyed_process_with_the_fix(spark, tmp_path):
    frame = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    with pytest.raises(ConfigurationError, match=r"needs a watermark.*withWatermark\('ts', '10 seconds'\)"):
        keyed_process(frame, ["user"], Count(), "user STRING, count BIGINT", event_time_column="ts")
    # processing time needs none
    keyed_process(frame, ["user"], Count(), "user STRING, count BIGINT", time_mode="processing_time")


def test_an_invalid_output_schema_says_output_schema(spark, tmp_path):
    frame = spark.readStream.schema(SCHEMA).json(str(tmp_path)).withWatermark("ts", "0 seconds")
    with pytest.raises(ConfigurationError, match=r"output_schema 'user STRNG, count' is not a valid DDL schema"):
        keyed_process(frame, ["user"], Count(), "user STRNG, count", event_time_column="ts")
    with pytest.raises(ConfigurationError, match=r"side output 'late' schema 'x' is not a valid DDL schema"):
        keyed_process(frame, ["user"], Count(), "user STRING, count BIGINT", event_time_column="ts",
                      side_outputs={"late": "x"})


def test_errors_never_list_internal_columns_as_the_users(spark, tmp_path):
    frame = spark.readStream.schema(SCHEMA).json(str(tmp_path)).withWatermark("ts", "0 seconds")
    with pytest.raises(ConfigurationError) as failure:
        keyed_process(frame, ["user"], Count(), "user STRING, count BIGINT", event_time_column="missing")
    assert "_keyedstate_" not in str(failure.value) and "user, payload, ts" in str(failure.value)
    with pytest.raises(ConfigurationError, match="'_keyedstate_watermark_anchor' is not in the DataFrame"):
        keyed_process(frame, ["user"], Count(), "user STRING, count BIGINT",
                      event_time_column="_keyedstate_watermark_anchor")


def test_an_output_error_names_the_location_once_and_the_function(spark, tmp_path):
    message = run_until_failure(spark, tmp_path, Count(bad_output=True), [ROW], "output_once")
    assert message.count("keyed_process key group") == message.count("InvalidOutputError:")
    assert "output of Count" in message
