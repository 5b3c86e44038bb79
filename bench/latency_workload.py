"""End-to-end latency of a Kafka -> keyed_process -> Kafka pipeline, as a user of the fraud-alerting demo runs it.

One *run* is one pipeline at one rate: a producer thread sends events over ``KEYS`` keys at a steady rate into a fresh
4-partition input topic, the query reads them with the ``keyedstate-kafka`` source and writes one output record per
input with the ``keyedstate-kafka`` sink to a fresh output topic, and a ``read_committed`` consumer thread of that
topic takes each record's arrival time. Every record carries its send time (``time.time_ns()`` in the producer) in
its value, so latency is arrival time minus send time, both read from this process's clock. Only the events sent
after the first ``warmup_s`` seconds count: the first batches of a new query start Python workers and compile code.

Pipelines (``VARIANTS``):

* ``floor``: the projection-only query on the same source and sink: what Spark, the source and the sink cost.
* ``keyed_process``: ValueState count per key, one output per input (``CountPerKey``), event time from the record
  timestamp with a 10-second watermark, 128 key groups, ``spark.sql.shuffle.partitions`` 4 (the bench default).
* ``bare applyInPandasWithState``: the same count written by hand on Spark's API (``count_buckets``: a pickled dict
  of counts in each bucket's state row, grouped by ``pmod(xxhash64(key), buckets)``, event-time timeout mode, the
  same watermark): what Spark's stateful operator costs before keyedstate adds anything. With 2 buckets over 2
  shuffle partitions (one Spark group per task, one task per core of ``local[2]``) it is the lowest latency this
  Spark API gives the pipeline.

each with the sink's ``exactly_once`` or ``at_least_once`` guarantee; the keyed ones in heap or RocksDB mode and
with other numbers of key groups or shuffle partitions where the variant says so.

A run *keeps up* with its rate when every event sent reached the output topic and the latency did not grow while it
ran: the median latency of the last third of the measured events is at most ``KEEP_UP_GROWTH`` times that of the
first third (a query that falls behind shows a latency that rises with the backlog).
"""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from keyedstate import KeyedProcessFunction, RuntimeContext, Types, ValueStateDescriptor

PARTITIONS = 4
KEYS = 10_000
KEEP_UP_GROWTH = 1.5
DRAIN_TIMEOUT_S = 90.0
WATERMARK_DELAY = "10 seconds"
OUTPUT_SCHEMA = "key string, value string"


class CountPerKey(KeyedProcessFunction):
    """Counts each key's events in a ValueState and emits one record per event: ``(key, "<sent ns>:<count>")``."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value.key, f"{value.sent}:{count}"


FLOOR = "floor"
KEYED_PROCESS = "keyed_process"
BARE = "bare"  # a hand-written applyInPandasWithState function over num_key_groups buckets


@dataclass(frozen=True)
class Variant:
    """One pipeline of the suite; ``label`` names it in results and report."""

    label: str
    pipeline: str  # FLOOR, KEYED_PROCESS or BARE
    guarantee: str = "at_least_once"
    state_backend: str = "heap"
    num_key_groups: int = 128
    shuffle_partitions: int = 4
    progress_metrics: bool = True


FLOOR_ALO = Variant("floor, at-least-once", FLOOR)
FLOOR_EO = Variant("floor, exactly-once", FLOOR, guarantee="exactly_once")
HEAP_ALO = Variant("keyed_process heap, at-least-once", KEYED_PROCESS)
HEAP_EO = Variant("keyed_process heap, exactly-once", KEYED_PROCESS, guarantee="exactly_once")
ROCKSDB_ALO = Variant("keyed_process rocksdb, at-least-once", KEYED_PROCESS, state_backend="rocksdb")
ROCKSDB_ALO_8 = Variant("keyed_process rocksdb, at-least-once, 8 key groups", KEYED_PROCESS, state_backend="rocksdb",
                        num_key_groups=8)
HEAP_ALO_SP8 = Variant("keyed_process heap, at-least-once, 8 shuffle partitions", KEYED_PROCESS, shuffle_partitions=8)
# docs/operations.md, "Tuning": what fewer Spark groups and tasks per micro-batch buy
HEAP_ALO_8 = Variant("keyed_process heap, at-least-once, 8 key groups", KEYED_PROCESS, num_key_groups=8)
HEAP_ALO_8_SP2 = Variant("keyed_process heap, at-least-once, 8 key groups, 2 shuffle partitions", KEYED_PROCESS,
                         num_key_groups=8, shuffle_partitions=2)
HEAP_EO_8_SP2 = Variant("keyed_process heap, exactly-once, 8 key groups, 2 shuffle partitions", KEYED_PROCESS,
                        guarantee="exactly_once", num_key_groups=8, shuffle_partitions=2)

# the ceiling of Spark's API: how close to the floor any applyInPandasWithState pipeline gets
BARE_128 = Variant("bare applyInPandasWithState, at-least-once, 128 buckets", BARE)
BARE_4 = Variant("bare applyInPandasWithState, at-least-once, 4 buckets", BARE, num_key_groups=4)
BARE_4_EO = Variant("bare applyInPandasWithState, exactly-once, 4 buckets", BARE, guarantee="exactly_once",
                    num_key_groups=4)
BARE_2_SP2 = Variant("bare applyInPandasWithState, at-least-once, 2 buckets, one per shuffle partition of 2", BARE,
                     num_key_groups=2, shuffle_partitions=2)
BARE_2_SP2_EO = Variant("bare applyInPandasWithState, exactly-once, 2 buckets, one per shuffle partition of 2", BARE,
                        guarantee="exactly_once", num_key_groups=2, shuffle_partitions=2)
# what the progress metrics (on by default) cost per micro-batch
HEAP_ALO_NO_METRICS = Variant("keyed_process heap, at-least-once, no progress metrics", KEYED_PROCESS,
                              progress_metrics=False)

VARIANTS = {v.label: v for v in (FLOOR_ALO, FLOOR_EO, HEAP_ALO, HEAP_EO, ROCKSDB_ALO, ROCKSDB_ALO_8, HEAP_ALO_SP8,
                                 HEAP_ALO_8, HEAP_ALO_8_SP2, HEAP_EO_8_SP2, HEAP_ALO_NO_METRICS, BARE_128, BARE_4,
                                 BARE_4_EO, BARE_2_SP2, BARE_2_SP2_EO)}


def count_buckets(bucket: tuple, frames: Any, state: Any) -> Any:
    """``CountPerKey`` by hand on ``applyInPandasWithState``: a bucket's counts are one pickled dict in its row."""
    import pickle

    import pandas as pd

    counts: dict = pickle.loads(state.get[0]) if state.exists else {}
    for frame in frames:
        keys, sent = frame["key"].tolist(), frame["sent"].tolist()
        values = []
        for k, s in zip(keys, sent):
            counts[k] = n = counts.get(k, 0) + 1
            values.append(f"{s}:{n}")
        yield pd.DataFrame({"key": keys, "value": values})
    state.update((pickle.dumps(counts, protocol=5),))


def _bare_query(events: Any, buckets: int) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from keyedstate.spark.key_group_layout import BALANCED, grouping_value_column

    # The grouping values keyed_process's balanced layout gives its key groups, so every shuffle partition gets
    # buckets / partitions of them: as plain ints, buckets 0 and 1 both hash to partition 1 of 2 (and 0 to 3 to
    # partitions 2 and 3 of 4), which leaves other partitions without any.
    bucket = grouping_value_column(F.pmod(F.xxhash64("key"), F.lit(buckets)), buckets, BALANCED)
    prepared = events.withWatermark("timestamp", WATERMARK_DELAY).withColumn("bucket", bucket)
    return prepared.groupBy("bucket").applyInPandasWithState(
        count_buckets, OUTPUT_SCHEMA, "counts BINARY", "append", GroupStateTimeout.EventTimeTimeout)


@dataclass
class Arrivals:
    """What the consumer thread saw: (send ns, latency ns) per record."""

    records: list[tuple[int, int]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


def _new_topics(bootstrap: str, count: int) -> list[str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    names = [f"latency-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        future.result(60)
    time.sleep(0.5)  # a new topic's leaders appear in metadata a moment before they take requests
    return names


def _delete_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    for future in admin.delete_topics(names).values():
        future.result(60)


def _consume(bootstrap: str, topic: str, arrivals: Arrivals, expected: list[int]) -> None:
    """Reads ``topic`` from its start until ``arrivals.done`` is set and ``expected[0]`` records have arrived."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-probe-{topic}",
                         "isolation.level": "read_committed", "enable.auto.commit": "false",
                         "fetch.wait.max.ms": "10"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    try:
        while not (arrivals.done.is_set() and len(arrivals.records) >= expected[0]):
            for message in consumer.consume(1000, 0.05):
                if message.error() is None:
                    arrived = time.time_ns()
                    sent = int(message.value().split(b":", 1)[0])
                    arrivals.records.append((sent, arrived - sent))
    finally:
        consumer.close()


def _produce(bootstrap: str, topic: str, rate: int, seconds: float, seed: int) -> int:
    """Sends ``rate`` events per second for ``seconds``, paced in steps of a few milliseconds; returns how many."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "1", "acks": "all"})
    rng = random.Random(seed)
    start = time.perf_counter()
    sent = 0
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
        due = int(rate * elapsed)
        while sent < due:
            try:
                producer.produce(topic, key=b"k%05d" % rng.randrange(KEYS), value=b"%d" % time.time_ns())
                sent += 1
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        time.sleep(0.003)
    assert producer.flush(60) == 0
    return sent


def _pipeline(spark: Any, variant: Variant, bootstrap: str, topics: list[str], directory: str) -> Any:
    from pyspark.sql import functions as F

    from keyedstate.spark import keyed_process

    events = (spark.readStream.format("keyedstate-kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topics[0])
              .option("startingOffsets", "earliest").option("group.id", f"latency-{topics[0]}").load()
              .select(F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("sent"),
                      "timestamp"))
    if variant.pipeline == BARE:
        output = _bare_query(events, variant.num_key_groups)
    elif variant.pipeline == KEYED_PROCESS:
        output = keyed_process(events.withWatermark("timestamp", WATERMARK_DELAY), ["key"], CountPerKey(),
                               OUTPUT_SCHEMA, event_time_column="timestamp", num_key_groups=variant.num_key_groups,
                               state_backend=variant.state_backend, state_storage=f"{directory}/state",
                               uid="latency-count", progress_metrics=variant.progress_metrics)
    else:
        output = events.select("key", F.col("sent").alias("value"))
    writer = (output.writeStream.format("keyedstate-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topics[1]).option("checkpointLocation", f"{directory}/checkpoint"))
    if variant.guarantee == "at_least_once":
        writer = writer.option("deliveryGuarantee", "at_least_once")
    else:
        writer = writer.option("transactionalIdPrefix", f"latency-{topics[1]}")
    spark.conf.set("spark.sql.shuffle.partitions", str(variant.shuffle_partitions))
    return writer.start()


def summarize(records: list[tuple[int, int]], measured_from_ns: int, sent: int, batches_s: list[float]) -> dict:
    """The run's result: latency percentiles (seconds) of the events sent from ``measured_from_ns`` on, whether it
    kept up, and its micro-batches' median duration."""
    measured = sorted((s, latency / 1e9) for s, latency in records if s >= measured_from_ns)
    latencies = [latency for _, latency in measured]
    third = max(1, len(measured) // 3)
    first, last = [x for _, x in measured[:third]], [x for _, x in measured[-third:]]
    growth = statistics.median(last) / statistics.median(first) if latencies else None
    received = len({s for s, _ in records})  # at-least-once may deliver an event twice: count events, not records
    result: dict[str, Any] = {"sent": sent, "received": received, "duplicates": len(records) - received,
                              "measured": len(latencies),
                              "growth": growth and round(growth, 3),
                              "kept_up": bool(latencies) and received >= sent and growth <= KEEP_UP_GROWTH,
                              "batches": len(batches_s),
                              "median_batch_s": round(statistics.median(batches_s), 3) if batches_s else None}
    for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)):
        result[name] = round(float(np.percentile(latencies, q * 100)), 4) if latencies else None
    return result


def run_pipeline(spark: Any, bootstrap: str, variant: Variant, rate: int, seconds: float, warmup_s: float,
                 seed: int = 0) -> dict:
    """One run of ``variant`` at ``rate`` events/s: ``warmup_s + seconds`` of sending, then until every event arrived
    (at most ``DRAIN_TIMEOUT_S``); returns :func:`summarize`'s result with the variant and rate."""
    topics = _new_topics(bootstrap, 2)
    directory = tempfile.mkdtemp(prefix="latency-bench-")
    arrivals, expected = Arrivals(), [0]
    reader = threading.Thread(target=_consume, args=(bootstrap, topics[1], arrivals, expected), daemon=True)
    reader.start()
    query = _pipeline(spark, variant, bootstrap, topics, directory)
    try:
        measured_from = time.time_ns() + int(warmup_s * 1e9)
        sent = _produce(bootstrap, topics[0], rate, warmup_s + seconds, seed)
        sending_ended = time.monotonic()
        expected[0] = sent
        arrivals.done.set()
        reader.join(DRAIN_TIMEOUT_S)
        drain_s = time.monotonic() - sending_ended
        if query.exception() is not None:
            raise AssertionError(f"{variant.label} at {rate}/s failed: {query.exception()}")
    finally:
        query.stop()
        arrivals.done.set()
        expected[0] = 0  # the reader stops now even if records are missing
        reader.join(30)
    batches_s = [p.durationMs["triggerExecution"] / 1000 for p in query.recentProgress
                 if p.numInputRows > 0 and p.durationMs.get("triggerExecution")]
    result = summarize(list(arrivals.records), measured_from, sent, batches_s)
    result.update({"variant": variant.label, "rate": rate, "seconds": seconds, "drain_s": round(drain_s, 2)})
    _delete_topics(bootstrap, topics)
    shutil.rmtree(directory, ignore_errors=True)
    return result


def ratio(rounds: list[dict], numerator: str, denominator: str, metric: str = "p99") -> Optional[dict]:
    """Median over rounds of ``numerator``'s ``metric`` over ``denominator``'s in the same round (keys of a round
    are ``"<variant label> @ <rate>"``)."""
    values = [r[numerator][metric] / r[denominator][metric] for r in rounds
              if numerator in r and denominator in r and r[numerator][metric] and r[denominator][metric]]
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "rounds": [round(v, 3) for v in values]}
