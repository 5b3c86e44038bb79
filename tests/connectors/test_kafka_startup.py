"""Startup modes (semantics.md item 17) against a real broker.

``initialOffset`` is what Spark calls once for a new query; it is exercised directly here (the stream reader is plain
Python), plus one end-to-end query per behaviour that needs Spark (group offsets, checkpoint wins over startup mode).
"""

from __future__ import annotations

import time

import pytest

from connectors.kafka import (
    FORMAT_NAME,
    KafkaConfigurationError,
    NoCommittedOffsetError,
    NoOffsetForTimestampError,
    OffsetOutOfRangeError,
)
from connectors.kafka.source import KafkaStreamReader
from connectors.kafka.source_options import parse_options
from kafka_helpers import BatchFileSink, committed_offsets, create_topic, produce, read_sink, unique

pytestmark = pytest.mark.kafka


def initial(bs: str, **opts) -> dict:
    reader = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": bs, "commitOffsets": "false", **opts}))
    return reader.initialOffset()


def commit_group(bs: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": "false"})
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    c.close()


BASE_TS = (int(time.time()) - 600) * 1000  # recent enough that retention keeps the records


@pytest.fixture(scope="module")
def topic10(kafka_broker) -> str:
    """3 partitions; 10 records each (offsets 0..9); offset k of every partition has timestamp BASE_TS + 1000 * k."""
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 3)
    produce(bs, topic, 30, 3, timestamp_ms=lambda i: BASE_TS + 1000 * (i // 3))
    return topic


def test_earliest_and_latest(kafka_broker, topic10):
    bs = kafka_broker.bootstrap
    assert initial(bs, subscribe=topic10, startingOffsets="earliest") == {topic10: {"0": 0, "1": 0, "2": 0}}
    assert initial(bs, subscribe=topic10, startingOffsets="latest") == {topic10: {"0": 10, "1": 10, "2": 10}}
    assert initial(bs, subscribe=topic10) == {topic10: {"0": 10, "1": 10, "2": 10}}  # Spark's default: latest



def test_a_query_start_resolves_latest_once_even_when_records_arrive_in_between(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    produce(bs, topic, 4, 2)
    reader = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": bs, "commitOffsets": "false",
                                              "subscribe": topic, "startingOffsets": "latest"}))
    first = reader.initialOffset()
    assert first == {topic: {"0": 2, "1": 2}}
    produce(bs, topic, 4, 2)  # Spark asks again while starting the query: the start must not move
    first[topic]["0"] = -99  # and callers cannot alter the remembered answer
    assert reader.initialOffset() == {topic: {"0": 2, "1": 2}}

def test_explicit_json_with_earliest_and_latest_sentinels(kafka_broker, topic10):
    bs = kafka_broker.bootstrap
    got = initial(bs, subscribe=topic10, startingOffsets=f'{{"{topic10}": {{"0": 4, "1": -2, "2": -1}}}}')
    assert got == {topic10: {"0": 4, "1": 0, "2": 10}}


def test_explicit_json_must_cover_every_partition(kafka_broker, topic10):
    with pytest.raises(KafkaConfigurationError, match=r"missing .*\[2\]"):
        initial(kafka_broker.bootstrap, subscribe=topic10, startingOffsets=f'{{"{topic10}": {{"0": 1, "1": 1}}}}')


def test_explicit_offset_out_of_range_is_a_specific_error(kafka_broker, topic10):
    bs = kafka_broker.bootstrap
    spec = f'{{"{topic10}": {{"0": 1, "1": 1, "2": 500}}}}'
    with pytest.raises(OffsetOutOfRangeError) as e:
        initial(bs, subscribe=topic10, startingOffsets=spec)
    assert f"{topic10}[2]" in str(e.value) and "0..10" in str(e.value) and bs in str(e.value)
    assert "failOnDataLoss" in str(e.value)
    # failOnDataLoss=false clamps into the available range instead
    assert initial(bs, subscribe=topic10, startingOffsets=spec, failOnDataLoss="false") == {
        topic10: {"0": 1, "1": 1, "2": 10}}


def test_timestamp_modes(kafka_broker, topic10):
    bs = kafka_broker.bootstrap
    assert initial(bs, subscribe=topic10, startingTimestamp=str(BASE_TS + 4000)) == {
        topic10: {"0": 4, "1": 4, "2": 4}}
    assert initial(bs, subscribe=topic10, startingTimestamp=str(BASE_TS + 4500)) == {
        topic10: {"0": 5, "1": 5, "2": 5}}
    per_partition = f'{{"{topic10}": {{"0": {BASE_TS}, "1": {BASE_TS + 2000}, "2": {BASE_TS + 9000}}}}}'
    assert initial(bs, subscribe=topic10, startingOffsetsByTimestamp=per_partition,
                   startingTimestamp=str(BASE_TS + 4000)) == {topic10: {"0": 0, "1": 2, "2": 9}}  # per-partition wins
    future = str(BASE_TS + 60_000)
    with pytest.raises(NoOffsetForTimestampError, match="startingOffsetsByTimestampStrategy"):
        initial(bs, subscribe=topic10, startingTimestamp=future)
    assert initial(bs, subscribe=topic10, startingTimestamp=future, startingOffsetsByTimestampStrategy="latest") == {
        topic10: {"0": 10, "1": 10, "2": 10}}


def test_group_with_committed_offsets_and_reset_when_missing(kafka_broker, topic10):
    bs = kafka_broker.bootstrap
    group = unique("g")
    commit_group(bs, group, topic10, {0: 3, 1: 7})
    # partition 2 has no committed offset: groupOffsetReset decides (default latest, like Kafka's auto.offset.reset)
    assert initial(bs, subscribe=topic10, startingOffsets="group", **{"group.id": group}) == {
        topic10: {"0": 3, "1": 7, "2": 10}}
    assert initial(bs, subscribe=topic10, startingOffsets="group", groupOffsetReset="earliest",
                   **{"group.id": group}) == {topic10: {"0": 3, "1": 7, "2": 0}}
    with pytest.raises(NoCommittedOffsetError, match="groupOffsetReset"):
        initial(bs, subscribe=topic10, startingOffsets="group", groupOffsetReset="none", **{"group.id": group})


def test_group_without_any_committed_offsets_uses_reset_strategy(kafka_broker, topic10):
    bs = kafka_broker.bootstrap
    group = unique("fresh")
    assert initial(bs, subscribe=topic10, startingOffsets="group", groupOffsetReset="earliest",
                   **{"group.id": group}) == {topic10: {"0": 0, "1": 0, "2": 0}}
    assert initial(bs, subscribe=topic10, startingOffsets="group", **{"group.id": group}) == {
        topic10: {"0": 10, "1": 10, "2": 10}}


def test_group_offset_beyond_the_log_is_out_of_range(kafka_broker, topic10):
    bs = kafka_broker.bootstrap
    group = unique("g")
    commit_group(bs, group, topic10, {0: 99, 1: 0, 2: 0})
    with pytest.raises(OffsetOutOfRangeError, match=rf"{topic10}\[0\]"):
        initial(bs, subscribe=topic10, startingOffsets="group", **{"group.id": group})


@pytest.mark.spark
def test_query_starts_from_group_offsets_and_restart_resumes_from_checkpoint_not_startup_mode(
        spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    group = unique("g")
    produce(bs, topic, 20, 2)  # 10 per partition
    commit_group(bs, group, topic, {0: 6, 1: 8})
    ckpt = str(tmp_path / "c")
    opts = {"kafka.bootstrap.servers": bs, "subscribe": topic, "group.id": group, "startingOffsets": "group"}
    q = (spark.readStream.format(FORMAT_NAME).options(**opts).load().writeStream.option("checkpointLocation", ckpt)
         .foreachBatch(BatchFileSink(tmp_path / "o")).trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    rows = read_sink(tmp_path / "o")
    assert sorted((p, o) for _, p, o in rows) == [(0, 6), (0, 7), (0, 8), (0, 9), (1, 8), (1, 9)]
    # Restart with a different startup mode: the checkpoint wins, only new records are read.
    produce(bs, topic, 4, 2, start=20)
    opts2 = dict(opts, startingOffsets="earliest")
    q = (spark.readStream.format(FORMAT_NAME).options(**opts2).load().writeStream.option("checkpointLocation", ckpt)
         .foreachBatch(BatchFileSink(tmp_path / "o")).trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    rows = read_sink(tmp_path / "o")
    assert sorted(int(v) for v, _, _ in rows) == [12, 14, 16, 17, 18, 19, 20, 21, 22, 23]  # nothing re-read
    # planning the restarted query's batch called commit(end of the first run's batch): exactly its end offsets
    assert committed_offsets(bs, group, topic, 2) == {0: 10, 1: 10}
