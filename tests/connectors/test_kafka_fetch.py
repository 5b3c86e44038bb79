"""Arrow conversion of consumed records (no broker needed)."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE

from connectors.kafka.fetch import ARROW_SCHEMA, _to_batch


def test_batch_columns_match_spark_kafka_source_conventions():
    b = _to_batch("t", 3, [b"k", None, b"k3"], [b"v", b"", None], [10, 11, 13], [1_000, 2_000, 3_000],
                  [TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE],
                  [None, [("h", b"x"), ("h2", None)], []])
    assert b.schema.equals(ARROW_SCHEMA)
    rows = b.to_pylist()
    assert [(r["key"], r["value"], r["topic"], r["partition"], r["offset"]) for r in rows] == [
        (b"k", b"v", "t", 3, 10), (None, b"", "t", 3, 11), (b"k3", None, "t", 3, 13)]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [1_000, 2_000, 3_000]
    assert [r["timestampType"] for r in rows] == [0, 1, -1]  # Spark: 0 = CreateTime, 1 = LogAppendTime
    assert [r["headers"] for r in rows] == [None, [{"key": "h", "value": b"x"}, {"key": "h2", "value": None}], []]


def test_batch_without_any_headers_has_null_header_lists():
    b = _to_batch("t", 0, [b"a", b"b"], [b"1", b"2"], [0, 1], [5, 6], [TIMESTAMP_CREATE_TIME] * 2, [None, None])
    assert b.schema.equals(ARROW_SCHEMA)
    assert b.column("headers").null_count == 2
