"""Arrow conversion of consumed records and the fetch loop's requests (no broker needed)."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE, Message

from connectors.kafka.fetch import ARROW_SCHEMA, _consume, _to_batch
from connectors.kafka.retry import RetryBudget
from connectors.kafka.source_options import parse_options


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


class _RecordingConsumer:
    """Serves one partition's log [0, log_end) and records how many messages each consume() asked for (a real
    consumer waits out its timeout when fewer than that many are there)."""

    def __init__(self, log_end: int) -> None:
        self.log_end = log_end
        self.position = 0
        self.asked: list[int] = []

    def consume(self, num_messages: int, timeout: float) -> list:
        self.asked.append(num_messages)
        stop = min(self.position + num_messages, self.log_end)
        batch = [Message(topic="t", partition=0, offset=o, key=b"k", value=b"v", timestamp=(TIMESTAMP_CREATE_TIME, o),
                         headers=None, error=None) for o in range(self.position, stop)]
        self.position = stop
        return batch


def test_a_read_never_asks_for_more_records_than_its_range_still_holds():
    opts = parse_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "commitOffsets": "false",
                          "maxBatchRecords": "10"})
    consumer = _RecordingConsumer(log_end=25)  # the range ends at the end of the log: nothing more will come
    consumer.position = 3  # assigned at the range's start
    batches = list(_consume(opts, consumer, RetryBudget(1000, 10, "b:1"), "t", 0, 3, 25, "topic 't' partition 0"))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(3, 25))
    assert consumer.asked == [10, 10, 2]
