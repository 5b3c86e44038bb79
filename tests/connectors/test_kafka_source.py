"""The keyedstate-kafka source through real Spark streaming queries against a real KRaft broker."""

from __future__ import annotations

import time

import pytest

from connectors.kafka import FORMAT_NAME, KafkaOffsetCommitListener, attach_commit_listener
from kafka_helpers import (
    BatchFileSink,
    CommitMonitor,
    committed_offsets,
    create_topic,
    last_committed_end,
    produce,
    read_sink,
    spark_batch_end,
    spark_log_batches,
    unique,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _reader(spark, **opts):
    return spark.readStream.format(FORMAT_NAME).options(**opts).load()


@pytest.mark.slow
def test_100k_records_exactly_once_and_group_offsets_track_spark_commit_log(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 4)
    group = unique("g")
    produce(bs, topic, 100_000, 4)
    ckpt = str(tmp_path / "ckpt")
    sink = BatchFileSink(tmp_path / "out")
    observed: list[tuple[int, dict, dict]] = []

    def each_batch(df, batch_id):
        # At the start of batch N the commit log ends at N-1: the group must (eventually) hold exactly its end offsets.
        committed_ids = spark_log_batches(ckpt, "commits")
        expected = spark_batch_end(ckpt, committed_ids[-1], topic) if committed_ids else {}
        deadline = time.monotonic() + 30
        got = committed_offsets(bs, group, topic, 4)
        while got != expected and time.monotonic() < deadline:
            time.sleep(0.1)
            got = committed_offsets(bs, group, topic, 4)
        observed.append((batch_id, expected, got))
        sink(df, batch_id)

    opts = {"kafka.bootstrap.servers": bs, "subscribe": topic, "group.id": group, "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "20000"}
    with CommitMonitor(bs, group, topic, 4, ckpt) as monitor:
        q = (_reader(spark, **opts).writeStream.option("checkpointLocation", ckpt).foreachBatch(each_batch)
             .trigger(availableNow=True).start())
        listener = attach_commit_listener(spark, q, opts, ckpt)
        try:
            assert q.awaitTermination(300), "query did not finish"
            assert q.exception() is None
            assert listener.wait_committed(30)
            last_id, last_end = last_committed_end(ckpt, topic)
            wait_for(lambda: committed_offsets(bs, group, topic, 4) == last_end, 30, "final commit")
        finally:
            spark.streams.removeListener(listener)
    rows = read_sink(tmp_path / "out")
    assert len(rows) == 100_000
    assert sorted(int(v) for v, _, _ in rows) == list(range(100_000))
    assert len({(p, o) for _, p, o in rows}) == 100_000
    assert last_end == {0: 25_000, 1: 25_000, 2: 25_000, 3: 25_000}
    assert committed_offsets(bs, group, topic, 4) == last_end
    assert len(observed) >= 5  # maxOffsetsPerTrigger split the topic into several batches
    for batch_id, expected, got in observed:
        assert got == expected, f"at batch {batch_id}: group {got} != last committed batch {expected}"
    assert monitor.samples > 10
    assert monitor.violations == []


def test_output_schema_and_row_contents_match_spark_kafka_source(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    base = (int(time.time()) - 60) * 1000  # recent: retention deletes records older than 7 days at once
    produce(bs, topic, 3, 1, timestamp_ms=lambda i: base + i, headers=True)
    df = _reader(spark, **{"kafka.bootstrap.servers": bs, "subscribe": topic, "commitOffsets": "false",
                           "startingOffsets": "earliest"})
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    q = df.writeStream.format("memory").queryName("schema_rows").trigger(availableNow=True) \
        .option("checkpointLocation", str(tmp_path / "c")).start()
    assert q.awaitTermination(120)
    rows = spark.sql("select key, value, topic, partition, offset, unix_millis(timestamp) ts, timestampType, "
                     "headers from schema_rows order by offset").collect()
    assert [(r.key, r.value, r.topic, r.partition, r.offset, r.ts, r.timestampType) for r in rows] == [
        (str(i).encode(), str(i).encode(), topic, 0, i, base + i, 0) for i in range(3)]
    assert [[(h.key, h.value) for h in r.headers] for r in rows] == [[("h", str(i).encode())] for i in range(3)]


def test_listener_commits_the_last_batch_before_a_clean_stop(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    group = unique("g")
    ckpt = str(tmp_path / "ckpt")
    opts = {"kafka.bootstrap.servers": bs, "subscribe": topic, "group.id": group, "startingOffsets": "earliest"}

    def run(produce_from: int, n: int, with_listener: bool) -> dict[int, int]:
        sink = BatchFileSink(tmp_path / "out")
        q = (_reader(spark, **opts).writeStream.option("checkpointLocation", ckpt).foreachBatch(sink)
             .trigger(processingTime="300 milliseconds").start())
        listener = attach_commit_listener(spark, q, opts, ckpt) if with_listener else None
        try:
            produce(bs, topic, n // 2, 2, start=produce_from)
            wait_for(lambda: len(read_sink(tmp_path / "out")) >= produce_from + n // 2, 60, "first wave")
            produce(bs, topic, n // 2, 2, start=produce_from + n // 2)
            wait_for(lambda: len(read_sink(tmp_path / "out")) >= produce_from + n, 60, "second wave")
            wait_for(lambda: last_committed_end(ckpt, topic)[1] == {0: (produce_from + n) // 2,
                                                                     1: (produce_from + n) // 2}, 60,
                     "last batch in commit log")
        finally:
            q.stop()
        if listener is not None:
            assert listener.wait_committed(30)
            spark.streams.removeListener(listener)
        return last_committed_end(ckpt, topic)[1]

    # Without the listener Spark never calls commit() for the last batch: the group lags one batch behind.
    end_a = run(0, 40, with_listener=False)
    assert end_a == {0: 20, 1: 20}
    wait_for(lambda: committed_offsets(bs, group, topic, 2) != {}, 30, "reader's commit of an earlier batch")
    committed_a = committed_offsets(bs, group, topic, 2)
    assert all(committed_a[p] <= end_a[p] for p in committed_a)
    assert committed_a != end_a
    # With the listener the last batch is committed right after Spark commits it, and again at termination.
    end_b = run(40, 40, with_listener=True)
    assert end_b == {0: 40, 1: 40}
    assert committed_offsets(bs, group, topic, 2) == end_b
    rows = read_sink(tmp_path / "out")
    assert sorted(int(v) for v, _, _ in rows) == list(range(80))


def test_listener_ignores_batches_not_in_the_commit_log(kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    group = unique("g")
    ckpt = tmp_path / "ckpt"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "commits").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}'
    (ckpt / "offsets" / "0").write_text(f'v1\n{meta}\n{{"{topic}":{{"0":5}}}}')
    (ckpt / "offsets" / "1").write_text(f'v1\n{meta}\n{{"{topic}":{{"0":9}}}}')
    (ckpt / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    produce(bs, topic, 10, 1)
    listener = KafkaOffsetCommitListener({"kafka.bootstrap.servers": bs, "subscribe": topic, "group.id": group},
                                         str(ckpt))
    assert listener.commit_latest() == 0
    assert listener.wait_committed(20)
    assert committed_offsets(bs, group, topic, 1) == {0: 5}  # batch 1 is planned but not committed by Spark


def test_max_offsets_per_trigger_and_min_partitions(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    produce(bs, topic, 400, 2)
    seen: list[tuple[int, int, int]] = []

    def each(df, batch_id):
        seen.append((batch_id, df.count(), df.rdd.getNumPartitions()))

    q = (_reader(spark, **{"kafka.bootstrap.servers": bs, "subscribe": topic, "commitOffsets": "false",
                           "startingOffsets": "earliest", "maxOffsetsPerTrigger": "100", "minPartitions": "6"})
         .writeStream.option("checkpointLocation", str(tmp_path / "c")).foreachBatch(each)
         .trigger(availableNow=True).start())
    assert q.awaitTermination(180)
    assert [n for _, n, _ in seen] == [100, 100, 100, 100]
    assert all(parts >= 6 for _, _, parts in seen)


def test_new_partitions_are_discovered_and_read_from_earliest(spark, kafka_broker, tmp_path):
    from confluent_kafka.admin import AdminClient, NewPartitions

    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    sink = BatchFileSink(tmp_path / "out")
    q = (_reader(spark, **{"kafka.bootstrap.servers": bs, "subscribe": topic, "commitOffsets": "false",
                           "startingOffsets": "earliest"})
         .writeStream.option("checkpointLocation", str(tmp_path / "c")).foreachBatch(sink)
         .trigger(processingTime="300 milliseconds").start())
    try:
        produce(bs, topic, 20, 2)
        wait_for(lambda: len(read_sink(tmp_path / "out")) == 20, 60, "first 20 records")
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
        produce(bs, topic, 30, 3, start=20)  # 10 of them land in the new partition 2
        wait_for(lambda: len(read_sink(tmp_path / "out")) >= 50, 60, "records of the new partition")
    finally:
        q.stop()
    rows = read_sink(tmp_path / "out")
    assert sorted(int(v) for v, _, _ in rows) == list(range(50))
    assert sorted(o for _, p, o in rows if p == 2) == list(range(10))


def test_transaction_markers_and_aborted_records_do_not_block_the_read(spark, kafka_broker, tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    p = Producer({"bootstrap.servers": bs, "transactional.id": unique("tx")})
    p.init_transactions(30)
    for i, commit in ((0, True), (1, False), (2, True)):
        p.begin_transaction()
        for j in range(5):
            p.produce(topic, value=f"{i}-{j}".encode(), partition=0)
        p.flush(30)  # make sure the records of the aborted transaction reach the log
        p.commit_transaction(30) if commit else p.abort_transaction(30)
    # log: 0-4 records, 5 commit marker, 6-10 aborted records, 11 abort marker, 12-16 records, 17 commit marker
    reader = Consumer({"bootstrap.servers": bs, "group.id": unique("r"), "isolation.level": "read_committed"})
    wait_for(lambda: reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1] == 18, 30,
             "last stable offset past the final commit marker")
    reader.close()
    q = (_reader(spark, **{"kafka.bootstrap.servers": bs, "subscribe": topic, "commitOffsets": "false",
                           "startingOffsets": "earliest"})
         .writeStream.option("checkpointLocation", str(tmp_path / "c")).foreachBatch(BatchFileSink(tmp_path / "o"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert q.exception() is None
    values = sorted(v for v, _, _ in read_sink(tmp_path / "o"))
    assert values == sorted([f"0-{j}" for j in range(5)] + [f"2-{j}" for j in range(5)])
    assert spark_batch_end(str(tmp_path / "c"), spark_log_batches(str(tmp_path / "c"), "commits")[-1], topic) == {
        0: 18}  # 3 x 5 records + 3 markers


def test_commits_off_never_touches_the_group(spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    group = unique("g")
    produce(bs, topic, 10, 1)
    opts = {"kafka.bootstrap.servers": bs, "subscribe": topic, "group.id": group, "commitOffsets": "false",
            "startingOffsets": "earliest", "maxOffsetsPerTrigger": "3"}
    q = (_reader(spark, **opts).writeStream.option("checkpointLocation", str(tmp_path / "c"))
         .foreachBatch(BatchFileSink(tmp_path / "o")).trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert len(read_sink(tmp_path / "o")) == 10
    assert len(spark_log_batches(str(tmp_path / "c"), "commits")) == 4
    assert committed_offsets(bs, group, topic, 1) == {}
