"""Timestamps outside pandas' nanosecond range (after 2262-04-11, before 1677-09-21) are valid Spark timestamps:
keyed_process hands them to the function as the same ``datetime.datetime`` s as any other timestamp."""

from __future__ import annotations

import datetime as dt

import pytest

from keyedstate import KeyedCoProcessFunction, KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.spark import keyed_co_process
from tests.spark.file_stream import failure_message, start_query, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "user STRING, ts TIMESTAMP, until TIMESTAMP, local TIMESTAMP_NTZ"
OUTPUT = "user STRING, count BIGINT, ts STRING, until STRING, local STRING, event_ms BIGINT, fired_at BIGINT"


class Remember(KeyedProcessFunction):
    """Emits what process_element saw (the timestamps as ISO strings), and a row when a timer a minute after an
    element after 1970 fires."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        for column in ("ts", "until", "local"):
            assert value[column] is None or isinstance(value[column], dt.datetime), value
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        if ctx.timestamp() >= 0:  # timers take non-negative epoch milliseconds
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 60_000)
        until, local = (None if value[c] is None else value[c].isoformat() for c in ("until", "local"))
        yield value["user"], count, value["ts"].isoformat(), until, local, ctx.timestamp(), None

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), self.count.value(), None, None, None, None, timestamp


ROWS = [
    {"user": "forever", "ts": "9999-12-31T23:59:59.999999Z", "until": "9999-12-31T00:00:00Z",
     "local": "9999-12-31T23:59:59"},
    {"user": "ancient", "ts": "1500-06-01T12:00:00Z", "until": None, "local": "0001-01-01T00:00:00"},
    {"user": "now", "ts": "2024-07-01T12:00:00.123456Z", "until": "2262-04-12T00:00:00Z", "local": None},
]


@pytest.fixture()
def new_york(spark):
    """A session time zone with an offset, so the test sees which wall clock the function gets."""
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    yield
    spark.conf.set("spark.sql.session.timeZone", previous)


def test_event_and_value_timestamps_up_to_year_9999_reach_the_function_as_datetimes(spark, tmp_path, new_york,
                                                                                     state_backend):
    write_input(tmp_path / "in", 0, ROWS)
    query = start_query(spark, tmp_path, Remember(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
                        query_name="far_timestamps", **state_backend)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = {(r.user, r.fired_at is not None): r for r in spark.table("far_timestamps").collect()}
    # the session time zone's wall clock, as for every timestamp column PySpark hands to Python (New York is
    # UTC-5 in winter, UTC-4 in summer, and LMT -4:56:02 before 1883)
    assert rows["forever", False].ts == "9999-12-31T18:59:59.999999"
    assert rows["forever", False].until == "9999-12-30T19:00:00"
    assert rows["forever", False].local == "9999-12-31T23:59:59"  # TIMESTAMP_NTZ: no time zone applies
    assert rows["forever", False].event_ms == 253402300799999
    assert rows["ancient", False].ts == "1500-06-01T07:03:58" and rows["ancient", False].until is None
    assert rows["ancient", False].local == "0001-01-01T00:00:00"
    assert rows["ancient", False].event_ms == -14818680000000
    assert rows["now", False].ts == "2024-07-01T08:00:00.123456"
    assert rows["now", False].until == "2262-04-11T20:00:00" and rows["now", False].local is None
    # the year-9999 event moved the watermark to its own time: the 2024 key's timer fired, its own (a minute
    # later) waits
    assert rows["now", True].fired_at == 1719835200123 + 60_000 and ("forever", True) not in rows


def test_with_drop_late_events_the_watermarked_column_past_2262_fails_naming_column_key_and_range(spark, tmp_path):
    write_input(tmp_path / "in", 0, ROWS[:1])
    message = failure_message(start_query(spark, tmp_path, Remember(), schema=SCHEMA, key_columns=["user"],
                                          output_schema=OUTPUT, query_name="far_watermarked", drop_late_events=True))
    assert "keyed_process: column 'ts' holds 9999-12-31" in message and "for key (forever)" in message
    assert "1677-09-21 00:12:43.145225 to 2262-04-11 23:47:16.854775" in message
    assert "drop_late_events=False" in message and "ArrowInvalid" not in message


class Describe(KeyedCoProcessFunction):
    """Emits which input an element came from and its timestamps, as ISO strings."""

    def process_element1(self, value, ctx):
        yield ctx.get_current_key().isoformat(), "first", value["seen"].isoformat()

    def process_element2(self, value, ctx):
        yield ctx.get_current_key().isoformat(), "second", value["paid"].isoformat()


def test_keyed_co_process_hands_year_9999_keys_and_values_to_both_inputs(spark, tmp_path):
    write_input(tmp_path / "first", 0, [{"until": "9999-12-31T00:00:00Z", "seen": "9999-12-31T23:59:59Z"}])
    write_input(tmp_path / "second", 0, [{"expiry": "9999-12-31T00:00:00Z", "paid": "1200-01-01T00:00:00Z"}])
    first = (spark.readStream.schema("until TIMESTAMP, seen TIMESTAMP").json(str(tmp_path / "first"))
             .withWatermark("seen", "0 seconds"))
    second = (spark.readStream.schema("expiry TIMESTAMP, paid TIMESTAMP").json(str(tmp_path / "second"))
              .withWatermark("paid", "0 seconds"))
    output = keyed_co_process(first, second, ["until"], ["expiry"], Describe(), "key STRING, input STRING, at STRING",
                              event_time_columns=("seen", "paid"), num_key_groups=3)
    query = (output.writeStream.format("memory").queryName("far_co_process")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(tuple(r) for r in spark.table("far_co_process").collect()) == [
        ("9999-12-31T00:00:00", "first", "9999-12-31T23:59:59"),
        ("9999-12-31T00:00:00", "second", "1200-01-01T00:00:00"),
    ]
