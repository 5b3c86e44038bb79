"""The sink when librdkafka's local queue is full (connectors/kafka/sink_records.py and, for the bulk path,
connectors/kafka/bulk_producer.py): it waits for room and goes on with the refused record, so every row is written
once and in order. Real broker, without Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from connectors.kafka import sink_writer
from connectors.kafka.bulk_producer import bulk_path_available
from connectors.kafka.sink_options import parse_sink_options
from connectors.kafka.sink_writer import SinkTask, write_task
from kafka_helpers import create_topic, read_committed

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("empty_producer_pool")]


def _batch(first: int, count: int, with_keys: bool) -> pa.RecordBatch:
    columns = {"value": pa.array([f"v{i:05d}" for i in range(first, first + count)], pa.string())}
    if with_keys:
        columns["key"] = pa.array([f"k{i % 3}".encode() for i in range(first, first + count)], pa.binary())
    return pa.record_batch(columns)


@pytest.mark.parametrize("path", ["bulk", "python"] if bulk_path_available() else ["python"])
@pytest.mark.parametrize("with_keys", [True, False], ids=["keys", "no key column"])
def test_a_full_local_queue_delays_records_but_writes_each_once_and_in_order(kafka_broker, monkeypatch, with_keys,
                                                                             path):
    monkeypatch.setattr(sink_writer, "bulk_path_available", lambda: path == "bulk")
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 3)
    # room for 7 records: nearly every produce() call of the 600 finds the queue full
    opts = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": topic, "deliveryGuarantee": "at_least_once",
                               "kafka.queue.buffering.max.messages": "7", "kafka.linger.ms": "1"})
    batches = [_batch(0, 250, with_keys), _batch(250, 350, with_keys)]

    assert write_task(opts, iter(batches), SinkTask("q", 0, 0)).records == 600

    records = read_committed(bs, topic)
    values = [v.decode() for _, _, v, _ in records]
    assert sorted(values) == [f"v{i:05d}" for i in range(600)]  # each exactly once
    for partition in {p for p, _, _, _ in records}:  # and in input order within each partition
        in_partition = [v for p, _, v, _ in records if p == partition]
        assert in_partition == sorted(in_partition)
    if with_keys:
        assert all(k == f"k{int(v.decode()[1:]) % 3}".encode() for _, k, v, _ in records)
