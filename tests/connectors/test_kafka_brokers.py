"""Broker loss (semantics.md item 19) on a 3-node KRaft cluster, replication factor 3."""

from __future__ import annotations

import time

import pytest

from connectors.kafka import FORMAT_NAME
from kafka_helpers import BatchFileSink, create_topic, produce, read_sink, unique, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _start(spark, opts: dict, ckpt: str, out, trigger: str = "300 milliseconds"):
    return (spark.readStream.format(FORMAT_NAME).options(**opts).load().writeStream
            .option("checkpointLocation", ckpt).foreachBatch(BatchFileSink(out))
            .trigger(processingTime=trigger).start())


def test_one_broker_stopped_mid_stream_and_bootstrap_list_naming_it(spark, kafka_cluster3, tmp_path):
    cluster = kafka_cluster3
    bs = cluster.bootstrap
    topic = create_topic(bs, 4, replication=3)
    produce(bs, topic, 200, 4)
    opts = {"kafka.bootstrap.servers": bs, "subscribe": topic, "group.id": unique("g"),
            "startingOffsets": "earliest"}
    q = _start(spark, opts, str(tmp_path / "c1"), tmp_path / "o1")
    try:
        wait_for(lambda: len(read_sink(tmp_path / "o1")) == 200, 120, "first 200 records")
        cluster.stop_node(0, kill=True)  # abrupt loss of a broker that leads some partitions
        produce(bs, topic, 200, 4, start=200)
        wait_for(lambda: len(read_sink(tmp_path / "o1")) >= 400 or not q.isActive, 180, "records after the loss")
        assert q.isActive and q.exception() is None
    finally:
        q.stop()
    rows = read_sink(tmp_path / "o1")
    assert sorted(int(v) for v, _, _ in rows) == list(range(400))

    # A new query whose bootstrap list names the stopped broker first still starts and reads everything.
    dead, alive = cluster.nodes[0].address, cluster.nodes[1].address
    opts2 = {"kafka.bootstrap.servers": f"{dead},{alive}", "subscribe": topic, "commitOffsets": "false",
             "startingOffsets": "earliest"}
    q2 = (spark.readStream.format(FORMAT_NAME).options(**opts2).load().writeStream
          .option("checkpointLocation", str(tmp_path / "c2")).foreachBatch(BatchFileSink(tmp_path / "o2"))
          .trigger(availableNow=True).start())
    assert q2.awaitTermination(180)
    assert q2.exception() is None
    assert sorted(int(v) for v, _, _ in read_sink(tmp_path / "o2")) == list(range(400))


def test_all_brokers_down_20s_within_budget_resumes_and_short_budget_fails_clearly(spark, kafka_cluster3, tmp_path):
    cluster = kafka_cluster3
    bs = cluster.bootstrap
    topic = create_topic(bs, 2, replication=3)
    produce(bs, topic, 100, 2)
    base = {"kafka.bootstrap.servers": bs, "subscribe": topic, "startingOffsets": "earliest",
            "requestTimeoutMs": "2000", "retryBackoffMs": "500"}
    patient = _start(spark, {**base, "group.id": unique("patient")}, str(tmp_path / "c1"), tmp_path / "o1",
                     trigger="500 milliseconds")
    impatient = _start(spark, {**base, "group.id": unique("impatient"), "brokerRetryTimeoutMs": "5000"},
                       str(tmp_path / "c2"), tmp_path / "o2", trigger="500 milliseconds")
    try:
        wait_for(lambda: len(read_sink(tmp_path / "o1")) == 100 and len(read_sink(tmp_path / "o2")) == 100, 120,
                 "both queries caught up")
        down_at = time.monotonic()
        for i in range(3):
            cluster.stop_node(i, kill=True)
        # the query with a 5 s budget fails with an error naming brokers, topic and option
        wait_for(lambda: not impatient.isActive, 90, "the 5 s budget to run out")
        err = str(impatient.exception())
        assert "BrokersUnavailableError" in err
        assert all(n.address in err for n in cluster.nodes)
        assert topic in err and "brokerRetryTimeoutMs=5000" in err
        # the default budget (120 s) rides out a 20 s outage
        time.sleep(max(0.0, 20 - (time.monotonic() - down_at)))
        assert patient.isActive
        for i in range(3):
            cluster.start_node(i, wait=False)
        for i in range(3):
            cluster.nodes[i].wait_started(120)
        produce(bs, topic, 100, 2, start=100)
        wait_for(lambda: len(read_sink(tmp_path / "o1")) >= 200 or not patient.isActive, 180,
                 "records produced after the outage")
        assert patient.isActive and patient.exception() is None
    finally:
        patient.stop()
        impatient.stop()
    assert sorted(int(v) for v, _, _ in read_sink(tmp_path / "o1")) == list(range(200))
