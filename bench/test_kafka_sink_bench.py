"""Throughput of the keyedstate-kafka sink (exactly-once and at-least-once) vs Spark's built-in Kafka sink.

Every variant writes the same streaming input — KEYEDSTATE_KAFKA_SINK_BENCH_RECORDS rows (default 1,000,000) with a
key and a 100-byte value, read from 4 Parquet files (about 3 MB, one row group each) by Spark's file source in one
``Trigger.AvailableNow`` micro-batch — into a fresh 4-partition topic on a local KRaft broker started here. Spark runs
``local[2]`` and splits each file into 3 tasks of 1 MB, of which only the one holding the row group's middle reads
rows: 12 write tasks, 4 of them with 250,000 rows each.

**Records/s** are Spark's: the rows over the time Spark spent in the query's micro-batches (the sum of
``durationMs.triggerExecution``, which includes the sink's driver-side commit); the wall time of the whole query is
reported too. Each run checks what reached the topic: exactly N records (plus one transaction marker per task and
partition for exactly-once).

The variants run **interleaved** (every round runs each once, in turn; one warm-up round first) and the targets are
the medians of the per-round ratios: exactly-once >= 0.7x the built-in sink's records/s, at-least-once >= 1x.
The built-in sink needs ``bash scripts/kafka.sh fetch-spark`` (cached in .cache/kafka/spark-jars); without it only
our two modes are measured.

Run: ``PYSPARK_PYTHON=.venv/bin/python .venv/bin/python -m pytest bench/test_kafka_sink_bench.py --benchmark-only``
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
import uuid
from typing import Iterator

import pytest

from test_kafka_source import SPARK_JARS, broker, spark  # noqa: F401 - the shared broker and Spark session

N = int(os.environ.get("KEYEDSTATE_KAFKA_SINK_BENCH_RECORDS", "1000000"))
ROUNDS = 2 if os.environ.get("KEYEDSTATE_BENCH_SMOKE") else 5
PARTITIONS = 4
VALUE_BYTES = 100

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

EXACTLY_ONCE, AT_LEAST_ONCE, BUILT_IN = "keyedstate-kafka exactly_once", "keyedstate-kafka at_least_once", "built-in"


@pytest.fixture(scope="module")
def input_dir(spark) -> Iterator[str]:  # noqa: F811 - the fixture imported above
    path = tempfile.mkdtemp(prefix="kafka-sink-bench-input-")
    # a task per MB of each file: the files are small and compress well, so Spark would otherwise pack them into one
    spark.conf.set("spark.sql.files.maxPartitionBytes", "1m")
    (spark.range(N, numPartitions=PARTITIONS)
     .selectExpr("cast(id as string) as key", f"concat(lpad(cast(id as string), 10, '0'), repeat('x', "
                                               f"{VALUE_BYTES - 10})) as value")
     .write.mode("overwrite").parquet(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _new_topic(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"sink-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(60)
    time.sleep(0.5)
    return name


def _delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(60)


def _records_in(bootstrap: str, topic: str) -> int:
    """Sum of the partitions' end offsets (records plus transaction markers)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-bench-probe",
                  "isolation.level": "read_uncommitted"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS))
    finally:
        c.close()


def _write(spark, bootstrap: str, input_path: str, fmt: str, options: dict) -> dict:  # noqa: F811
    topic = _new_topic(bootstrap)
    ckpt = tempfile.mkdtemp(prefix="kafka-sink-bench-ckpt-")
    schema = "key string, value string"
    t0 = time.perf_counter()
    q = (spark.readStream.schema(schema).parquet(input_path).writeStream.format(fmt)
         .options(**{"kafka.bootstrap.servers": bootstrap, "topic": topic, **options})
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    assert q.awaitTermination(1800)
    wall_s = time.perf_counter() - t0
    assert q.exception() is None
    trigger_s = sum(p.durationMs.get("triggerExecution", 0) for p in q.recentProgress) / 1000
    written = _records_in(bootstrap, topic)
    # exactly-once: one transaction marker per write task and partition it wrote to
    markers = 16 * PARTITIONS if fmt != "kafka" and options.get("deliveryGuarantee") != "at_least_once" else 0
    assert N <= written <= N + markers, f"{fmt} {options}: {written} offsets in {topic}, expected {N} (+{markers})"
    _delete_topic(bootstrap, topic)
    shutil.rmtree(ckpt, ignore_errors=True)
    return {"wall_s": round(wall_s, 3), "trigger_s": round(trigger_s, 3),
            "records_per_s": round(N / trigger_s) if trigger_s else None}


def _variants(spark, bootstrap: str, input_path: str) -> dict:  # noqa: F811
    variants = {
        EXACTLY_ONCE: lambda: _write(spark, bootstrap, input_path, "keyedstate-kafka",
                                     {"transactionalIdPrefix": f"bench-{uuid.uuid4().hex[:8]}"}),
        AT_LEAST_ONCE: lambda: _write(spark, bootstrap, input_path, "keyedstate-kafka",
                                      {"deliveryGuarantee": "at_least_once"}),
        BUILT_IN: lambda: _write(spark, bootstrap, input_path, "kafka", {}),
    }
    if not any(SPARK_JARS.glob("spark-sql-kafka-0-10_*.jar")):
        print("\nSpark's Kafka sink could not be fetched (`bash scripts/kafka.sh fetch-spark`): not measured")
        variants.pop(BUILT_IN)
    return variants


def ratio_summary(rounds: list[dict]) -> dict:
    """Medians of per-round ratios of records/s (> 1: ours is faster), ours over the built-in sink, and the cost of
    exactly-once (exactly-once over at-least-once)."""
    out: dict = {}
    pairs = {"exactly_once vs built-in": (EXACTLY_ONCE, BUILT_IN),
             "at_least_once vs built-in": (AT_LEAST_ONCE, BUILT_IN),
             "exactly_once vs at_least_once": (EXACTLY_ONCE, AT_LEAST_ONCE)}
    for label, (ours, other) in pairs.items():
        for metric, suffix in (("trigger_s", "records/s"), ("wall_s", "wall")):
            ratios = [r[other][metric] / r[ours][metric] for r in rounds if ours in r and other in r]
            if ratios:
                out[f"{label} [{suffix}]"] = {"median": round(statistics.median(ratios), 3),
                                              "rounds": [round(x, 3) for x in ratios]}
    return out


def test_kafka_sinks_interleaved(benchmark, spark, broker, input_dir):  # noqa: F811
    """Every variant once per round, in turn; the benchmark's own time is that of a whole round."""
    variants = _variants(spark, broker, input_dir)
    rounds: list[dict] = []

    def one_round() -> None:
        rounds.append({name: run() for name, run in variants.items()})
        print(f"\nround {len(rounds) - 1}: " + ", ".join(
            f"{name} {m['records_per_s'] or 0:,} records/s ({m['trigger_s']:.2f} s in trigger, {m['wall_s']:.2f} s "
            f"wall)" for name, m in rounds[-1].items()) + f" (load {os.getloadavg()[0]:.1f})", flush=True)

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    timed = rounds[1:]  # the warm-up round comes first
    summary = ratio_summary(timed)
    benchmark.extra_info.update({"records": N, "value_bytes": VALUE_BYTES, "partitions": PARTITIONS,
                                 "rounds": timed, "ratios": summary, "load_avg_1m": round(os.getloadavg()[0], 2)})
    for key, r in summary.items():
        print(f"keyedstate-kafka sink {key}: {r['median']:.2f}x (median of {len(r['rounds'])} rounds: {r['rounds']})")
