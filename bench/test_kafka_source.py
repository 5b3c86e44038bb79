"""Throughput of the keyedstate-kafka source vs Spark's built-in Kafka source vs a raw confluent-kafka loop.

All three read the same topic (4 partitions, KEYEDSTATE_KAFKA_BENCH_RECORDS records of 100-byte values, default
2,000,000, large enough that reading, not query start-up, is most of the time) from a local KRaft broker started
here. Spark runs ``local[2]`` and counts each micro-batch in a foreachBatch sink (one batch: Trigger.AvailableNow
without maxOffsetsPerTrigger); query start-up is included in the time and reported on its own. The raw loop is one
Python process with the source's executor-consumer settings that assigns all partitions, touches
key/value/offset/timestamp/headers of every message and stops at the end offsets. Records/s are in each benchmark's
``extra_info``, for the Spark runs with Spark's per-phase ``durationMs`` and the time outside the trigger (query
start-up); bench/RESULTS.md has the numbers (``make bench``), bench/PROFILE-kafka.md the analysis.

Spark's built-in source comes from ``bash scripts/kafka.sh fetch-spark`` (spark-sql-kafka-0-10 from Maven
Central, cached in .cache/kafka/spark-jars); without it that benchmark is skipped with the command to run.

Run: ``PYSPARK_PYTHON=.venv/bin/python .venv/bin/python -m pytest bench/test_kafka_source.py --benchmark-only``
"""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
N = int(os.environ.get("KEYEDSTATE_KAFKA_BENCH_RECORDS", "2000000"))
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
    cluster = _cluster_module().KafkaCluster(lib, Path(tempfile.mkdtemp(prefix="kafka-bench-")), nodes=1,
                                             heap_mb=1024)
    try:
        cluster.start()
        yield cluster.bootstrap
    finally:
        cluster.stop(kill=True)


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


def _count_through_spark(spark, fmt: str, options: dict, phases: Optional[list] = None) -> int:
    counts: list[int] = []
    ckpt = tempfile.mkdtemp(prefix="kafka-bench-ckpt-")
    t0 = time.perf_counter()
    q = (spark.readStream.format(fmt).options(**options).load().writeStream.option("checkpointLocation", ckpt)
         .foreachBatch(lambda df, _id: counts.append(df.count())).trigger(availableNow=True).start())
    assert q.awaitTermination(1800)
    wall_ms = (time.perf_counter() - t0) * 1000
    assert q.exception() is None
    if phases is not None:
        # Spark's per-phase durations of the (single) batch, plus everything outside the trigger: query start-up
        # (for a Python data source that includes starting its stream-reader process) and shutdown.
        d: dict = {}
        for progress in q.recentProgress:
            for k, v in progress.durationMs.items():
                d[k] = d.get(k, 0) + v
        d["outsideTrigger"] = round(wall_ms - d.get("triggerExecution", 0))
        phases.append(d)
    return sum(counts)


def _record(benchmark, name: str, phases: Optional[list] = None) -> None:
    mean = benchmark.stats.stats.mean
    benchmark.extra_info.update({"records": N, "records_per_s": round(N / mean), "source": name,
                                 "load_avg_1m": round(os.getloadavg()[0], 2)})
    msg = f"\n{name}: {N} records, mean {mean:.2f} s -> {N / mean:,.0f} records/s (load {os.getloadavg()[0]:.1f})"
    if phases:
        timed = phases[-3:]  # the warm-up rounds come first
        mean_ms = {k: round(sum(p.get(k, 0) for p in timed) / len(timed)) for k in timed[0]}
        benchmark.extra_info["durationMs_mean"] = mean_ms
        msg += "\n  durationMs (mean of timed rounds): " + ", ".join(f"{k}={v}" for k, v in sorted(mean_ms.items()))
    print(msg)


def test_keyedstate_kafka_source(benchmark, spark, broker, topic):
    opts = {"kafka.bootstrap.servers": broker, "subscribe": topic, "startingOffsets": "earliest",
            "commitOffsets": "false"}
    phases: list = []
    result = benchmark.pedantic(_count_through_spark, args=(spark, "keyedstate-kafka", opts, phases), rounds=3,
                                iterations=1, warmup_rounds=2)
    assert result == N
    _record(benchmark, "keyedstate-kafka (Spark local[2])", phases)


def test_python_source_floor(benchmark, spark):
    """Not a competitor: what any Python streaming source costs here before reading a single record from Kafka."""
    from python_source_floor import FLOOR_FORMAT

    phases: list = []
    result = benchmark.pedantic(_count_through_spark, args=(spark, FLOOR_FORMAT, {"records": str(N)}, phases),
                                rounds=3, iterations=1, warmup_rounds=2)
    assert result == N
    _record(benchmark, "floor: a Python source with Kafka's schema and no Kafka (Spark local[2])", phases)


def test_spark_builtin_kafka_source(benchmark, spark, broker, topic):
    if not any(SPARK_JARS.glob("spark-sql-kafka-0-10_*.jar")):
        pytest.skip("Spark's Kafka source could not be fetched: run `bash scripts/kafka.sh fetch-spark`")
    opts = {"kafka.bootstrap.servers": broker, "subscribe": topic, "startingOffsets": "earliest"}
    phases: list = []
    result = benchmark.pedantic(_count_through_spark, args=(spark, "kafka", opts, phases), rounds=3, iterations=1,
                                warmup_rounds=2)
    assert result == N
    _record(benchmark, "Spark built-in kafka source (Spark local[2])", phases)


def _raw_loop(broker: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    from connectors.kafka.options import parse_options

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


def test_raw_confluent_kafka_loop(benchmark, broker, topic):
    result = benchmark.pedantic(_raw_loop, args=(broker, topic), rounds=3, iterations=1, warmup_rounds=2)
    assert result == N
    _record(benchmark, "raw confluent-kafka consumer loop (1 Python process)")
