"""The examples on Spark give exactly what the harness gives for the same micro-batches (the harness is the oracle)."""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest
from pyspark.sql import Row

from examples.count_with_timeout import CountWithTimeoutFunction
from examples.fraud_detection import FraudDetector
from examples.session_gap import SessionGapFunction
from tests.spark.file_stream import read_batches, replay_in_harness, start_query, wait_for_files, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
START_MS = int(EPOCH.timestamp() * 1000)


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def millis(row: dict) -> int:
    return int(dt.datetime.fromisoformat(row["ts"].replace("Z", "+00:00")).timestamp() * 1000)


def event_batches(seed: int, field: str, values: list[str]) -> list[list[dict]]:
    """Four batches of events 40 s apart (some out of order within a batch), then one far later to flush timers."""
    rng = random.Random(seed)
    batches = []
    for batch in range(4):
        base = START_MS + batch * 40_000
        rows = [
            {"user": f"u{rng.randrange(8)}", field: rng.choice(values), "ts": iso(base + rng.randrange(50_000))}
            for _ in range(rng.randrange(8, 20))
        ]
        batches.append(rows)
    batches.append([{"user": "late-flusher", field: values[0], "ts": iso(START_MS + 3_600_000)}])
    return batches


def run_on_spark(spark, tmp_path, function, inputs, **query):
    query_name = f"q{int(time.time() * 1000) % 10**9}"
    write_input(tmp_path / "in", 0, inputs[0])
    handle = start_query(spark, tmp_path, function, query_name=query_name, **query)
    try:
        handle.processAllAvailable()
        for index, rows in enumerate(inputs[1:], start=1):
            write_input(tmp_path / "in", index, rows)
            handle.processAllAvailable()
    finally:
        handle.stop()
    output = [tuple(row) for row in spark.sql(f"select * from {query_name}").collect()]
    return output, read_batches(tmp_path / "checkpoint")


def row_of(columns: list[str]):
    def to_value(row: dict) -> Row:
        values = []
        for column in columns:
            value = row[column]
            if column == "ts":
                value = dt.datetime.fromtimestamp(millis(row) / 1000)  # Spark hands out naive local datetimes
            values.append(value)
        return Row(**dict(zip(columns, values)))

    return to_value


@pytest.mark.parametrize("num_key_groups", [1, 7, 128])
def test_count_with_timeout_on_spark_equals_the_harness(spark, tmp_path, num_key_groups, state_backend):
    inputs = event_batches(1, "payload", ["click", "view"])
    output, batches = run_on_spark(
        spark, tmp_path, CountWithTimeoutFunction(), inputs, schema="user STRING, payload STRING, ts TIMESTAMP",
        key_columns=["user"], output_schema="user STRING, count BIGINT", num_key_groups=num_key_groups,
        **state_backend,
    )
    expected = replay_in_harness(
        CountWithTimeoutFunction(), lambda value: value[0], batches, inputs,
        to_value=row_of(["user", "payload", "ts"]), timestamp_of=millis, key_of=lambda r: r["user"],
    )
    assert len(expected) >= 8  # the workload really fires timeouts
    assert sorted(output) == sorted(expected)


@pytest.mark.parametrize("num_key_groups", [1, 7, 128])
def test_session_gap_on_spark_equals_the_harness(spark, tmp_path, num_key_groups, state_backend):
    inputs = event_batches(2, "action", ["open", "read", "buy"])
    output, batches = run_on_spark(
        spark, tmp_path, SessionGapFunction(), inputs, schema="user STRING, action STRING, ts TIMESTAMP",
        key_columns=["user"], num_key_groups=num_key_groups,
        output_schema="user STRING, session_start BIGINT, session_end BIGINT, event_count BIGINT, actions STRING",
        **state_backend,
    )
    expected = replay_in_harness(
        SessionGapFunction(), lambda value: value["user"], batches, inputs,
        to_value=row_of(["user", "action", "ts"]), timestamp_of=millis, key_of=lambda r: r["user"],
    )
    assert len(expected) >= 8
    assert sorted(output) == sorted(expected)


@pytest.mark.parametrize("num_key_groups", [1, 7, 128])
def test_fraud_detection_on_spark_equals_the_harness(spark, tmp_path, num_key_groups, state_backend):
    window_ms = 8_000  # wide enough that a slow batch on a busy machine stays inside it
    small, large = 0.5, 900.0
    inputs = [
        [{"account_id": "a", "amount": small}, {"account_id": "b", "amount": small},
         {"account_id": "c", "amount": 20.0}],
        [{"account_id": "a", "amount": large}, {"account_id": "c", "amount": small}],  # a: alert
        [{"account_id": "b", "amount": large}, {"account_id": "d", "amount": small}],  # b: window passed, no alert
        [{"account_id": "c", "amount": large}, {"account_id": "d", "amount": large}],  # d: alert; c: window passed
    ]
    query_name = f"fraud{num_key_groups}_{state_backend['state_backend']}"
    write_input(tmp_path / "in", 0, inputs[0])
    handle = start_query(
        spark, tmp_path, FraudDetector(window_ms=window_ms), schema="account_id STRING, amount DOUBLE",
        key_columns=["account_id"], output_schema="account_id STRING", event_time_column=None,
        time_mode="processing_time", num_key_groups=num_key_groups, trigger_ms=300, query_name=query_name,
        **state_backend,
    )
    checkpoint = tmp_path / "checkpoint"
    try:
        wait_for_files(checkpoint, 1)
        write_input(tmp_path / "in", 1, inputs[1])
        wait_for_files(checkpoint, 2)
        time.sleep(window_ms / 1000 + 1)  # b's and c's windows pass; their timers fire in batches without data
        write_input(tmp_path / "in", 2, inputs[2])
        wait_for_files(checkpoint, 3)
        write_input(tmp_path / "in", 3, inputs[3])
        wait_for_files(checkpoint, 4)
    finally:
        handle.stop()
    output = [tuple(row) for row in spark.sql(f"select * from {query_name}").collect()]
    batches = read_batches(tmp_path / "checkpoint")
    expected = replay_in_harness(
        FraudDetector(window_ms=window_ms), lambda value: value["account_id"], batches, inputs,
        to_value=lambda r: Row(account_id=r["account_id"], amount=r["amount"]), key_of=lambda r: r["account_id"],
    )
    assert sorted(expected) == [("a",), ("d",)]  # the batches Spark ran really exercise both outcomes
    assert sorted(output) == sorted(expected)
