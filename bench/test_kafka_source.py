"""Throughput of the keyedstate-kafka source vs Spark's built-in Kafka source vs a raw confluent-kafka loop.

All read the same topic (4 partitions, KEYEDSTATE_KAFKA_BENCH_RECORDS records of 100-byte values, default 2,000,000)
from a local KRaft broker started here. Spark runs ``local[2]`` and counts each micro-batch in a foreachBatch sink,
reading the whole topic with Trigger.AvailableNow, either in one micro-batch or in four (maxOffsetsPerTrigger = a
quarter of the topic, the usual way a query catches up on a backlog). The raw loop is one Python process with the
source's executor-consumer settings that assigns all partitions, touches key/value/offset/timestamp/headers of every
message and stops at the end offsets. A Python source that reads nothing (``python_source_floor.py``) shows what any
Python streaming source costs in Spark before it reads a record.

**Records/s through Spark** are Spark's own: the rows of a query's micro-batches over the time Spark spent in them
(``processedRowsPerSecond``, i.e. the sum of ``durationMs.triggerExecution``). Query start-up (for a Python source:
Spark starting its stream-reader process) is paid once per query, not per record, and is reported on its own, with the
wall time of the whole query. The raw loop's records/s count its whole run, consumer start included.

The machine's drift between minutes moves single measurements by 20% or more, so the variants run **interleaved**:
every round runs each of them once, in turn, and the targets are the medians of the per-round ratios (as in the state
and timer suites). One warm-up round comes first. ``extra_info`` of the one benchmark holds every round.

Spark's built-in source comes from ``bash scripts/kafka.sh fetch-spark`` (spark-sql-kafka-0-10 from Maven
Central, cached in .cache/kafka/spark-jars); without it those variants are left out and reported as not measured.

Run: ``PYSPARK_PYTHON=.venv/bin/python .venv/bin/python -m pytest bench/test_kafka_source.py --benchmark-only``
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
N = int(os.environ.get("KEYEDSTATE_KAFKA_BENCH_RECORDS", "2000000"))
ROUNDS = 2 if os.environ.get("KEYEDSTATE_BENCH_SMOKE") else 5
BATCHES = 4  # the catch-up variants: maxOffsetsPerTrigger = N / BATCHES
PARTITIONS = 4
SPARK_JARS = ROOT / ".cache" / "kafka" / "spark-jars"

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _cluster_module():
    spec = importlib.util.spec_from_file_location("keyedstate_kafka_cluster_bench",
                                                  ROOT / "scripts" / "kafka" / "cluster.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def broker():
    lib = ROOT / ".cache" / "kafka" / "lib"
    if not any(lib.glob("kafka_2.13-*.jar")):
        subprocess.run(["bash", str(ROOT / "scripts" / "kafka.sh"), "fetch"], check=True, timeout=600)
    data = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
    cluster = _cluster_module().KafkaCluster(lib, data, nodes=1, heap_mb=1024)
    try:
        cluster.start()
        yield cluster.bootstrap
    finally:
        cluster.stop(kill=True)
        shutil.rmtree(data, ignore_errors=True)  # the broker's log: GBs per run


@pytest.fixture(scope="module")
def topic(broker) -> str:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(60)
    time.sleep(1)
    p = Producer({"bootstrap.servers": broker, "linger.ms": 50, "batch.num.messages": 10000,
                  "compression.type": "lz4", "queue.buffering.max.messages": 1000000})
    value = b"x" * 100
    for i in range(N):
        while True:
            try:
                p.produce(name, key=str(i).encode(), value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return name


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    from connectors.kafka import KafkaSource
    from python_source_floor import PythonSourceFloor

    # Spark's Python workers import the floor source from this directory (the JVM, and so every worker, inherits
    # the environment of this process).
    bench_dir = str(Path(__file__).resolve().parent)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([bench_dir, *inherited])
    builder = (SparkSession.builder.master("local[2]").appName("keyedstate-kafka-bench")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "2g"))
    if not any(SPARK_JARS.glob("spark-sql-kafka-0-10_*.jar")):  # best effort; the built-in benchmark skips without
        subprocess.run(["bash", str(ROOT / "scripts" / "kafka.sh"), "fetch-spark"], timeout=600, check=False)
    jars = sorted(glob.glob(str(SPARK_JARS / "*.jar")))
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(KafkaSource)
    session.dataSource.register(PythonSourceFloor)
    yield session
    session.stop()


def _count_through_spark(spark, fmt: str, options: dict) -> dict:
    """One query over the whole topic; its wall time, Spark's time in its micro-batches, and their phases."""
    counts: list[int] = []
    ckpt = tempfile.mkdtemp(prefix="kafka-bench-ckpt-")
    t0 = time.perf_counter()
    q = (spark.readStream.format(fmt).options(**options).load().writeStream.option("checkpointLocation", ckpt)
         .foreachBatch(lambda df, _id: counts.append(df.count())).trigger(availableNow=True).start())
    assert q.awaitTermination(1800)
    wall_s = time.perf_counter() - t0
    assert q.exception() is None
    assert sum(counts) == N, f"{fmt} counted {sum(counts)} records, expected {N}"
    phases: dict = {}
    batches = 0
    for progress in q.recentProgress:
        batches += progress.numInputRows > 0
        for k, v in progress.durationMs.items():
            phases[k] = phases.get(k, 0) + v
    trigger_s = phases.get("triggerExecution", 0) / 1000
    shutil.rmtree(ckpt, ignore_errors=True)
    return {"wall_s": round(wall_s, 3), "trigger_s": round(trigger_s, 3),
            "add_batch_s": round(phases.get("addBatch", 0) / 1000, 3),
            "outside_trigger_s": round(wall_s - trigger_s, 3), "batches": batches}


def _raw_loop(broker: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    from connectors.kafka.source_options import parse_options

    # The limit: the same librdkafka settings as the source's executor consumers, and it stops at the end offsets
    # it looked up first, as a reader of a fixed range does (waiting for partition EOF would add a consume timeout).
    conf = parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic,
                          "commitOffsets": "false"}).librdkafka_config("consumer")
    conf.pop("logger")  # librdkafka's log lines stay in C, as in any plain consumer
    c = Consumer(conf)
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    n, remaining = 0, sum(ends.values())
    while remaining:
        for m in c.consume(10000, 1.0):
            if m.error() is not None:
                continue
            m.key(), m.value(), m.offset(), m.timestamp(), m.headers()
            n += 1
            remaining -= 1
    c.close()
    return n


def _timed_raw_loop(broker: str, topic: str) -> dict:
    t0 = time.perf_counter()
    assert _raw_loop(broker, topic) == N
    wall_s = time.perf_counter() - t0
    return {"wall_s": round(wall_s, 3), "trigger_s": round(wall_s, 3)}


def _variants(spark, broker: str, topic: str) -> dict:
    from python_source_floor import FLOOR_FORMAT

    ours = {"kafka.bootstrap.servers": broker, "subscribe": topic, "startingOffsets": "earliest",
            "commitOffsets": "false"}
    builtin = {"kafka.bootstrap.servers": broker, "subscribe": topic, "startingOffsets": "earliest"}
    per_batch = {"maxOffsetsPerTrigger": str(-(-N // BATCHES))}
    variants = {
        "keyedstate-kafka": lambda: _count_through_spark(spark, "keyedstate-kafka", ours),
        "built-in": lambda: _count_through_spark(spark, "kafka", builtin),
        "raw loop": lambda: _timed_raw_loop(broker, topic),
        "floor": lambda: _count_through_spark(spark, FLOOR_FORMAT, {"records": str(N)}),
        f"keyedstate-kafka, {BATCHES} batches": lambda: _count_through_spark(spark, "keyedstate-kafka",
                                                                            {**ours, **per_batch}),
        f"built-in, {BATCHES} batches": lambda: _count_through_spark(spark, "kafka", {**builtin, **per_batch}),
        f"floor, {BATCHES} batches": lambda: _count_through_spark(spark, FLOOR_FORMAT, {"records": str(N),
                                                                                      **per_batch}),
    }
    if not any(SPARK_JARS.glob("spark-sql-kafka-0-10_*.jar")):
        print("\nSpark's Kafka source could not be fetched (`bash scripts/kafka.sh fetch-spark`): the built-in "
              "variants are not measured")
        variants = {k: v for k, v in variants.items() if not k.startswith("built-in")}
    return variants


def ratio_summary(rounds: list[dict]) -> dict:
    """Medians of per-round ratios, keyedstate-kafka's records/s over the other's (> 1: keyedstate-kafka is faster).
    ``[records/s]`` compares Spark's in-trigger time (the raw loop: its whole run); ``[wall]`` whole queries."""
    out: dict = {}
    for suffix in ("", f", {BATCHES} batches"):
        ours = "keyedstate-kafka" + suffix
        for other, name in (("raw loop", "raw loop"), ("built-in" + suffix, "built-in")):
            for metric, label in (("trigger_s", "records/s"), ("wall_s", "wall")):
                ratios = [r[other][metric] / r[ours][metric] for r in rounds if ours in r and other in r]
                if ratios:
                    out[f"vs {name}{suffix} [{label}]"] = {"median": round(statistics.median(ratios), 3),
                                                          "rounds": [round(x, 3) for x in ratios]}
        # What reading from Kafka costs beyond Spark's hand-off of a Python source's rows (the floor's time in
        # micro-batches, as many as ours), against the raw loop reading the same records.
        floor = "floor" + suffix
        ratios = [r["raw loop"]["trigger_s"] / (r[ours]["trigger_s"] - r[floor]["trigger_s"]) for r in rounds
                  if ours in r and floor in r and "raw loop" in r and r[ours]["trigger_s"] > r[floor]["trigger_s"]]
        if ratios:
            out[f"vs raw loop{suffix}, the floor's time in micro-batches taken out [records/s]"] = {
                "median": round(statistics.median(ratios), 3), "rounds": [round(x, 3) for x in ratios]}
    return out


def test_kafka_sources_interleaved(benchmark, spark, broker, topic):
    """Every variant once per round, in turn; the benchmark's own time is that of a whole round."""
    variants = _variants(spark, broker, topic)
    rounds: list[dict] = []

    def one_round() -> None:
        rounds.append({name: run() for name, run in variants.items()})
        print(f"\nround {len(rounds) - 1}: " + ", ".join(
            f"{name} {m['wall_s']:.2f} s" + (f" (in trigger {m['trigger_s']:.2f})" if "outside_trigger_s" in m
                                              else "") for name, m in rounds[-1].items())
              + f" (load {os.getloadavg()[0]:.1f})", flush=True)

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    timed = rounds[1:]  # the warm-up round comes first
    summary = ratio_summary(timed)
    benchmark.extra_info.update({"records": N, "partitions": PARTITIONS, "batches": BATCHES, "rounds": timed,
                                 "ratios": summary, "load_avg_1m": round(os.getloadavg()[0], 2)})
    for key, r in summary.items():
        print(f"keyedstate-kafka {key}: {r['median']:.2f}x (median of {len(r['rounds'])} rounds: {r['rounds']})")
