"""Many timers per key on Spark's single timeout per group, including keys that receive no further data."""

from __future__ import annotations

import time

import pytest

from keyedstate import KeyedProcessFunction, TimeDomain
from tests.spark.file_stream import start_query, wait_until, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
OUTPUT = "user STRING, timer BIGINT, fired_at BIGINT, domain STRING"


class FiveTimers(KeyedProcessFunction):
    """The key "idle" registers five timers on its only element; every firing is reported."""

    def __init__(self, domain: TimeDomain, step_ms: int):
        self.domain = domain
        self.step_ms = step_ms

    def process_element(self, value, ctx):
        if value["user"] != "idle":
            return
        service = ctx.timer_service()
        if self.domain is TimeDomain.EVENT_TIME:
            for i in (3, 1, 5, 2, 4):  # registration order differs from timestamp order
                service.register_event_time_timer(ctx.timestamp() + i * self.step_ms)
        else:
            for i in (3, 1, 5, 2, 4):
                service.register_processing_time_timer(service.current_processing_time() + i * self.step_ms)
        yield from ()

    def on_timer(self, timestamp, ctx):
        service = ctx.timer_service()
        now = (service.current_watermark() if ctx.time_domain() is TimeDomain.EVENT_TIME
               else service.current_processing_time())
        yield ctx.get_current_key(), timestamp, now, ctx.time_domain().name


def iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def test_five_event_time_timers_fire_in_order_for_an_idle_key(spark, tmp_path, state_backend):
    write_input(tmp_path / "in", 0, [{"user": "idle", "ts": iso(T0)}, {"user": "clock", "ts": iso(T0)}])
    query = start_query(spark, tmp_path, FiveTimers(TimeDomain.EVENT_TIME, 1_000), schema="user STRING, ts TIMESTAMP",
                        key_columns=["user"], output_schema=OUTPUT, query_name="event_timers", **state_backend)
    try:
        query.processAllAvailable()
        # Only the other key sends data: the watermark passes two timers, then the rest.
        write_input(tmp_path / "in", 1, [{"user": "clock", "ts": iso(T0 + 2_500)}])
        query.processAllAvailable()
        write_input(tmp_path / "in", 2, [{"user": "clock", "ts": iso(T0 + 60_000)}])
        query.processAllAvailable()
    finally:
        query.stop()
    fired = [tuple(r) for r in spark.sql("select * from event_timers").collect()]
    assert [timer for _, timer, _, _ in fired] == [T0 + i * 1_000 for i in range(1, 6)]
    assert all(user == "idle" and domain == "EVENT_TIME" and watermark >= timer
               for user, timer, watermark, domain in fired)
    # The first two fired as soon as the watermark passed them, before the last data batch.
    assert [watermark for _, _, watermark, _ in fired[:2]] == [T0 + 2_500] * 2


def test_five_processing_time_timers_fire_in_order_for_an_idle_key(spark, tmp_path, state_backend):
    write_input(tmp_path / "in", 0, [{"user": "idle"}])
    query = start_query(spark, tmp_path, FiveTimers(TimeDomain.PROCESSING_TIME, 400), schema="user STRING",
                        key_columns=["user"], output_schema=OUTPUT, event_time_column=None,
                        time_mode="processing_time", trigger_ms=200, query_name="processing_timers",
                        **state_backend)
    try:
        wait_until(lambda: spark.sql("select * from processing_timers").count() >= 5, 90, "five timer firings")
        time.sleep(1)  # nothing more may fire
    finally:
        query.stop()
    fired = [tuple(r) for r in spark.sql("select * from processing_timers").collect()]
    timers = [timer for _, timer, _, _ in fired]
    assert len(fired) == 5 and timers == sorted(timers)
    assert [b - a for a, b in zip(timers, timers[1:])] == [400] * 4
    assert all(user == "idle" and domain == "PROCESSING_TIME" and now >= timer for user, timer, now, domain in fired)
