"""slow_call_warning_ms: a key-group call slower than it logs a WARNING on the worker (logger ``keyedstate.spark``)
naming the key group, the batch, the call's elements and timers, and its time in the function and in keyedstate;
keyed_process and keyed_co_process both take it, as every option."""

from __future__ import annotations

import time

import pytest

from keyedstate import KeyedCoProcessFunction, KeyedProcessFunction
from keyedstate.spark import keyed_co_process, keyed_process
from tests.spark.file_stream import wait_until, write_input
from tests.spark.worker_logs import log_warnings_to

pytestmark = pytest.mark.spark


class SleepsPerElement(KeyedProcessFunction):
    def __init__(self, log_directory: str) -> None:
        self.log_directory = log_directory

    def open(self, runtime_context):
        log_warnings_to(self.log_directory)

    def process_element(self, value, ctx):
        time.sleep(0.02)
        yield (value.user,)


class SleepsPerElementOfBoth(KeyedCoProcessFunction):
    def __init__(self, log_directory: str) -> None:
        self.log_directory = log_directory

    def open(self, runtime_context):
        log_warnings_to(self.log_directory)

    def process_element1(self, value, ctx):
        time.sleep(0.02)
        yield (value.user,)

    def process_element2(self, value, ctx):
        yield (value.user,)


def _run(spark, tmp_path, output, name: str) -> list[str]:
    # Processing-time mode runs a batch on every trigger to poll its timers, so availableNow or processAllAvailable
    # would never return: wait for the first batch's output instead.
    query = (output.writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        wait_until(lambda: spark.table(name).count() >= 3, 120, "the first batch's output")
    finally:
        query.stop()
    assert sorted(row.user for row in spark.table(name).collect()) == ["a", "a", "b"]
    return [line for log in (tmp_path / "logs").iterdir() for line in log.read_text().splitlines()]


def test_a_slow_call_is_logged_on_the_worker_with_its_counts_and_time_split(spark, tmp_path):
    (tmp_path / "logs").mkdir()
    write_input(tmp_path / "in", 0, [{"user": "a"}, {"user": "a"}, {"user": "b"}])
    source = spark.readStream.schema("user STRING").json(str(tmp_path / "in"))
    output = keyed_process(source, ["user"], SleepsPerElement(str(tmp_path / "logs")), "user STRING",
                           time_mode="processing_time", num_key_groups=1, slow_call_warning_ms=1)
    lines = _run(spark, tmp_path, output, "slow_calls")
    assert len(lines) == 1, lines
    assert lines[0].startswith("keyedstate.spark WARNING keyed_process key group 0, batch 0: the call took ")
    assert "(slow_call_warning_ms=1) for 3 elements and 0 timers: " in lines[0]
    user_ms = float(lines[0].split(" ms in the user function")[0].rsplit(" ", 1)[1])
    assert user_ms >= 60  # three elements of 20 ms each


def test_keyed_co_process_takes_the_option_too(spark, tmp_path):
    (tmp_path / "logs").mkdir()
    write_input(tmp_path / "first", 0, [{"user": "a"}, {"user": "b"}])
    write_input(tmp_path / "second", 0, [{"user": "a"}])
    first = spark.readStream.schema("user STRING").json(str(tmp_path / "first"))
    second = spark.readStream.schema("user STRING").json(str(tmp_path / "second"))
    output = keyed_co_process(first, second, ["user"], ["user"], SleepsPerElementOfBoth(str(tmp_path / "logs")),
                              "user STRING", time_mode="processing_time", num_key_groups=1, slow_call_warning_ms=1)
    lines = _run(spark, tmp_path, output, "slow_co_calls")
    assert len(lines) == 1, lines
    assert "keyed_co_process key group 0, batch 0: the call took " in lines[0]
    assert "for 3 elements and 0 timers" in lines[0]
