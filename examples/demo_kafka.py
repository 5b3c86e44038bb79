"""`make demo-kafka`: the demo's transactions go through a Kafka topic and the ``keyedstate-kafka`` source, and its
alerts go to another topic through the ``keyedstate-kafka`` sink, exactly once.

Needs a running broker (`make broker`). The generated batches are produced as waves, one Kafka transaction each, and
read back with ``spark.readStream.format("keyedstate-kafka")`` with a ``group.id``; the listener helper commits
every batch (the last one included) to the group. Each batch's alerts are written with
``df.write.format("keyedstate-kafka")`` inside ``foreachBatch`` (one Kafka transaction per Spark task, keyed by the
query and batch id, so a replayed batch writes nothing twice). After each batch the demo prints how many alerts a
``read_committed`` consumer of the alerts topic received from it, and, per partition of the input topic, the
group's committed offset, the partition's end offset and the lag.

Every wave becomes exactly one micro-batch, as every file does in file mode, without idle no-data batches in
between: the first wave is produced before the query starts, and each next one from inside the batch that holds the
previous one (its ``foreachBatch`` call, when that batch's offsets are fixed and the next batch cannot be planned
yet). A transaction over several partitions becomes visible to read_committed readers partition by partition (the
commit markers are written after ``commit_transaction`` returns), so the demo waits until every partition's last
stable offset covers the wave before it lets the batch end.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from connectors.kafka import BrokersUnavailableError, KafkaSource, attach_commit_listener, parse_options
from connectors.kafka.client import KafkaClient
from connectors.kafka.listener import batch_end_offsets
from connectors.kafka.offsets import TP, to_offset_json
from examples.demo import INPUT_SCHEMA, Progress, build_spark, generate_batches, watch_query
from examples.rich_fraud import ALERT_SCHEMA, RichFraudDetector

__all__ = ["check_broker", "ensure_topic", "WaveProducer", "AlertSink", "run_kafka_demo"]

log = logging.getLogger("keyedstate.demo.kafka")
#: librdkafka's own log lines (connection refused, reconnects); the demo reports failures itself.
_LIBRDKAFKA_LOG = logging.getLogger("keyedstate.demo.kafka.librdkafka")

PROBE_TIMEOUT_S = 5.0


def check_broker(bootstrap: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail within ``timeout_s`` with :class:`BrokersUnavailableError` when no broker answers at ``bootstrap``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _LIBRDKAFKA_LOG,
                         "socket.connection.setup.timeout.ms": str(int(timeout_s * 1000))})
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        raise BrokersUnavailableError(
            f"no Kafka broker answered at {bootstrap} within {timeout_s:.0f} s ({reason}). Start the local broker "
            f"with `make broker` (it prints its bootstrap address) and pass that address with --bootstrap-servers "
            f"if it is not {bootstrap}") from None


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0) -> int:
    """Create ``topic`` unless it exists; return its partition count once every partition has a leader."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _LIBRDKAFKA_LOG})
    if topic not in admin.list_topics(timeout=10).topics:
        future = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=timeout_s)[topic]
        try:
            future.result(timeout=timeout_s)
            print(f"created topic {topic!r} with {partitions} partitions", flush=True)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a concurrent run created it first
                raise
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is not None and metadata.error is None and metadata.partitions and all(
                p.leader >= 0 for p in metadata.partitions.values()) and _answers(admin, topic, metadata.partitions):
            return len(metadata.partitions)
        if time.monotonic() > deadline:
            raise BrokersUnavailableError(f"topic {topic!r} on {bootstrap} has no leader for every partition after "
                                          f"{timeout_s:.0f} s")
        time.sleep(0.2)


def _answers(admin: Any, topic: str, partitions: Any) -> bool:
    """Every partition's leader answers an offset request (a new topic's leaders appear in metadata a moment
    before they take requests)."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    try:
        futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
                                     request_timeout=10)
        for future in futures.values():
            future.result(timeout=15)
        return True
    except KafkaException:
        return False


class WaveProducer:
    """Produces one generated batch per Kafka transaction, keyed by account (an account stays on one partition)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self._producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"keyedstate-demo-{topic}",
                                   "linger.ms": 20, "logger": _LIBRDKAFKA_LOG})
        self._producer.init_transactions(30)
        self._next: dict[TP, int] = {}
        self._error: list[Any] = []

    def _delivered(self, error, message) -> None:
        if error is not None:
            self._error.append(error)
            return
        tp = (message.topic(), message.partition())
        self._next[tp] = max(self._next.get(tp, 0), message.offset() + 1)

    def produce(self, rows: list[dict[str, Any]]) -> dict[TP, int]:
        """Produce ``rows`` atomically; return, per partition written, the offset after the wave's last record."""
        self._next = {}
        self._producer.begin_transaction()
        for row in rows:
            while True:
                try:
                    # The record timestamp stays the produce time: the event times lie in 2024, and time-based
                    # retention would delete records stamped with them before the query reads them.
                    self._producer.produce(self.topic, key=row["account_id"].encode(), value=json.dumps(row).encode(),
                                           on_delivery=self._delivered)
                    break
                except BufferError:
                    self._producer.poll(0.05)
        self._producer.commit_transaction(60)
        if self._error:
            raise RuntimeError(f"producing to {self.topic!r} failed: {self._error[0]}")
        return dict(self._next)

    @staticmethod
    def wait_visible(client: KafkaClient, target: dict[TP, int], timeout_s: float = 60.0) -> None:
        """Wait until read_committed readers see all of a wave: every partition's last stable offset covers it."""
        deadline = time.monotonic() + timeout_s
        while not _covers(client.list_offsets(list(target), "latest"), target):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the committed wave {target} is still not visible after {timeout_s:g} s")
            time.sleep(0.01)


def _covers(end: dict[TP, int], target: dict[TP, int]) -> bool:
    return all(end.get(tp, 0) >= offset for tp, offset in target.items())


class AlertSink:
    """Writes a batch's alerts to ``topic`` through the keyedstate-kafka sink and counts what a ``read_committed``
    consumer of the topic then receives (records of committed transactions only)."""

    #: One prefix for the demo's query: transactional ids and progress markers also carry the query id.
    PREFIX = "keyedstate-demo-alerts"

    def __init__(self, bootstrap: str, topic: str, client: KafkaClient, partitions: int) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.topic = topic
        self.options = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "transactionalIdPrefix": self.PREFIX,
                        "brokerRetryTimeoutMs": "30000"}
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{self.PREFIX}-reader",
                                   "enable.auto.commit": "false", "isolation.level": "read_committed",
                                   "logger": _LIBRDKAFKA_LOG})
        start = client.list_offsets([(topic, p) for p in range(partitions)], "latest")
        self._consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in start.items()])
        self.received: dict[int, tuple[int, int]] = {}
        self.total = 0

    def write(self, alerts: Any, expected: int, batch_id: int) -> None:
        """In ``foreachBatch``: write the batch's alerts, then read them back (up to ``expected``, 30 s at most)."""
        from pyspark.sql import functions as F

        (alerts.select(F.col("account_id").alias("key"), F.to_json(F.struct(*alerts.columns)).alias("value"))
         .write.format("keyedstate-kafka").options(**self.options).mode("append").save())
        got = 0
        deadline = time.monotonic() + 30
        # Each task's transaction is committed when save() returns; its commit markers reach the partitions a moment
        # later, so the reader may need a few polls to see all of them.
        while got < expected and time.monotonic() < deadline:
            got += sum(1 for m in self._consumer.consume(1000, timeout=0.2) if m.error() is None)
        self.total += got
        self.received[batch_id] = (got, expected)

    def print(self) -> None:
        """The oldest batch's line (called once per reported batch, in batch order)."""
        if self.received:
            got, expected = self.received.pop(min(self.received))
            note = "" if got == expected else f" (expected {expected}: a replayed batch, or still in flight)"
            print(f"    kafka {self.topic}: {got} alerts committed by the keyedstate-kafka sink "
                  f"(exactly once), {self.total} in total{note}", flush=True)

    def close(self) -> None:
        self._consumer.close()


class OffsetReport:
    """Prints the group's committed offsets, the end offsets and the lag per partition (read the way the source
    reads them: committed offsets through a never-subscribing group consumer, ends as read_committed sees them)."""

    def __init__(self, source_options: dict[str, str], tps: list[TP]) -> None:
        self.opts = parse_options(source_options)
        self.client = KafkaClient(self.opts)
        self.listener = None
        self.tps = tps

    def print(self) -> None:
        # The listener commits on the progress event, asynchronously; wait so the lines show this batch's commit.
        if self.listener is not None:
            self.listener.wait_committed(timeout=15)
        committed = self.client.committed(self.opts.group_id, self.tps)
        ends = self.client.list_offsets(self.tps, "latest")
        for tp in self.tps:
            done = committed.get(tp)
            lag = ends[tp] - (done or 0)
            print(f"    kafka {tp[0]}[{tp[1]}] group {self.opts.group_id}: committed="
                  f"{'-' if done is None else done:>7} end={ends[tp]:>7} lag={lag:>6}", flush=True)

    def close(self) -> None:
        self.client.close()


def run_kafka_demo(args: argparse.Namespace) -> int:
    bootstrap, topic = args.bootstrap_servers, args.topic
    # librdkafka reports retries it recovers from (coordinator loading on a fresh broker) as warnings.
    _LIBRDKAFKA_LOG.setLevel(logging.ERROR)
    # Before Spark starts: a missing broker must fail in seconds, not after the source's retry budget.
    check_broker(bootstrap)
    partitions = ensure_topic(bootstrap, topic, args.partitions)
    alert_partitions = ensure_topic(bootstrap, args.alerts_topic, args.partitions)
    tps = [(topic, p) for p in range(partitions)]
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "group.id": args.group_id,
               "brokerRetryTimeoutMs": "30000"}
    report = OffsetReport(options, tps)  # after creating the topics: its client's metadata then has their leaders
    alert_sink = AlertSink(bootstrap, args.alerts_topic, report.client, alert_partitions)
    # Start at the current end so a topic holding earlier runs' records yields exactly this run's waves.
    options["startingOffsets"] = json.dumps(to_offset_json(report.client.list_offsets(tps, "latest")))
    waves = generate_batches(args.batches, args.per_batch, args.accounts, args.seed)

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="keyedstate-demo-kafka-"))
    checkpoint = workdir / "checkpoint"
    print(f"keyedstate demo (Kafka): {args.batches} waves of ~{args.per_batch} transactions over {args.accounts} "
          f"accounts into topic {topic!r} ({partitions} partitions) at {bootstrap}, group {args.group_id!r}, "
          f"alerts to topic {args.alerts_topic!r}, checkpoint in {workdir}", flush=True)
    spark = build_spark(args.shuffle_partitions)
    spark.dataSource.register(KafkaSource)
    from pyspark.sql import functions as F

    from keyedstate.spark import keyed_process

    records = spark.readStream.format("keyedstate-kafka").options(**options).load()
    transactions = (records.select(F.from_json(F.col("value").cast("string"), INPUT_SCHEMA).alias("t"))
                    .select("t.*").withWatermark("ts", "5 seconds"))
    alerts = keyed_process(transactions, ["account_id"], RichFraudDetector(), ALERT_SCHEMA, event_time_column="ts",
                           num_key_groups=args.key_groups)
    progress = Progress()
    producer = WaveProducer(bootstrap, topic)
    targets: list[dict[TP, int]] = []

    def produce_next_wave() -> None:
        targets.append(producer.produce(waves[len(targets)]))
        producer.wait_visible(report.client, targets[-1])
        log.info("produced wave %d: %s", len(targets) - 1, targets[-1])

    def on_batch(frame: Any, batch_id: int) -> None:
        progress.on_batch(frame, batch_id, write_alerts=alert_sink.write)
        # This batch's offsets are fixed and the next batch is planned only after this call returns.
        if len(targets) < len(waves) and _covers(batch_end_offsets(str(checkpoint), batch_id, report.opts),
                                                 targets[-1]):
            produce_next_wave()

    produce_next_wave()
    query = (alerts.writeStream.foreachBatch(on_batch)
             .option("checkpointLocation", str(checkpoint)).start())
    listener = report.listener = attach_commit_listener(spark, query, options, str(checkpoint))
    started = time.monotonic()
    reported = -1

    def stop_after_the_last_wave(last_reported: int) -> None:
        if len(targets) == len(waves) and last_reported >= 0 and _covers(
                batch_end_offsets(str(checkpoint), last_reported, report.opts), targets[-1]):
            status = query.status
            if not status["isDataAvailable"] and not status["isTriggerActive"]:
                query.stop()

    try:
        def print_batch_report() -> None:
            alert_sink.print()
            report.print()

        reported = watch_query(query, progress, stop_after_the_last_wave, interval_s=0.2,
                               on_batch_reported=print_batch_report)
        listener.wait_committed(timeout=15)
    finally:
        if query.isActive:
            query.stop()
        report.close()
        alert_sink.close()
        spark.stop()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    progress.finish(started, reported + 1, args.alerts_out)
    return 0
