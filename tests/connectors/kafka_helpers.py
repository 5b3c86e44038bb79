"""Helpers shared by the Kafka connector tests (topic creation, producing, reading group offsets)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Callable, Optional

#: librdkafka log lines of test clients go to Python logging (captured by pytest) instead of stderr.
_QUIET = logging.getLogger("tests.kafka.clients")


def close_clients() -> None:
    """Close cached test clients (before the brokers stop, so they do not log reconnect attempts)."""
    while _READERS:
        _, c = _READERS.popitem()
        try:
            c.close()
        except Exception:
            pass


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, partitions: int, replication: int = 1, name: Optional[str] = None,
                 config: Optional[dict] = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = name or unique("t")
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _QUIET})
    fut = admin.create_topics([NewTopic(name, partitions, replication, config=config or {})],
                              operation_timeout=30, request_timeout=30)[name]
    fut.result(timeout=60)
    # wait until every partition has a leader visible in metadata
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return name
        time.sleep(0.2)
    raise TimeoutError(f"topic {name} has no leaders after 30 s")


def produce(bootstrap: str, topic: str, n: int, partitions: int, start: int = 0,
            timestamp_ms: Optional[Callable[[int], int]] = None, acks: str = "all",
            headers: bool = False) -> None:
    """Produce values ``b"<i>"`` for i in [start, start+n), round-robin over partitions (partition = i % parts)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "logger": _QUIET, "linger.ms": 20,
                  "enable.idempotence": "true", "batch.num.messages": 10000})
    for i in range(start, start + n):
        kwargs = {}
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms(i)
        if headers:
            kwargs["headers"] = [("h", str(i).encode())]
        while True:
            try:
                p.produce(topic, key=str(i).encode(), value=str(i).encode(), partition=i % partitions, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
    remaining = p.flush(60)
    assert remaining == 0, f"{remaining} messages not delivered"


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets per partition (absent = none), read by an independent, never-subscribing
    consumer of the group (the AdminClient's ListConsumerGroupOffsets crashes librdkafka 2.16 on NOT_COORDINATOR)."""
    from confluent_kafka import TopicPartition

    consumer = _group_reader(bootstrap, group)
    deadline = time.monotonic() + 30
    while True:
        try:
            res = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
            return {tp.partition: tp.offset for tp in res if tp.offset >= 0}
        except Exception:  # coordinator still loading right after broker start
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


_READERS: dict = {}


def _group_reader(bootstrap: str, group: str):
    from confluent_kafka import Consumer

    key = (bootstrap, group)
    if key not in _READERS:
        _READERS[key] = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": "false",
                                  "logger": _QUIET})
    return _READERS[key]


def wait_for(predicate: Callable[[], bool], timeout: float, message: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for: {message}")


# -- Spark side ------------------------------------------------------------------------------------------------


class BatchFileSink:
    """foreachBatch sink writing one JSON file per batch id (atomic rename): idempotent when a batch is replayed."""

    def __init__(self, directory) -> None:
        import os

        self.directory = str(directory)
        os.makedirs(self.directory, exist_ok=True)

    def __call__(self, df, batch_id: int) -> None:
        import json
        import os

        rows = df.select("value", "partition", "offset").collect()
        data = [[r["value"].decode(), r["partition"], r["offset"]] for r in rows]
        tmp = os.path.join(self.directory, f".batch-{batch_id}.tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, os.path.join(self.directory, f"batch-{batch_id}.json"))


def read_sink(directory) -> list[tuple[str, int, int]]:
    """All (value, partition, offset) rows written by :class:`BatchFileSink`."""
    import json
    import os

    out: list[tuple[str, int, int]] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("batch-"):
            with open(os.path.join(directory, name)) as f:
                out.extend(tuple(r) for r in json.load(f))
    return out


def spark_log_batches(checkpoint: str, log: str) -> list[int]:
    import os

    d = os.path.join(checkpoint, log)
    if not os.path.isdir(d):
        return []
    return sorted(int(n) for n in os.listdir(d) if n.isdigit())


def spark_batch_end(checkpoint: str, batch_id: int, topic: str) -> dict[int, int]:
    """End offsets of ``topic`` in batch ``batch_id`` straight from Spark's ``offsets/`` log (single source)."""
    import json
    import os

    with open(os.path.join(checkpoint, "offsets", str(batch_id))) as f:
        lines = f.read().splitlines()
    obj = json.loads(lines[2])
    return {int(p): int(o) for p, o in obj.get(topic, {}).items()}


def last_committed_end(checkpoint: str, topic: str) -> tuple[Optional[int], dict[int, int]]:
    """(newest batch id in ``commits/``, its end offsets) — what Spark has committed."""
    ids = spark_log_batches(checkpoint, "commits")
    if not ids:
        return None, {}
    return ids[-1], spark_batch_end(checkpoint, ids[-1], topic)


def assert_not_ahead(committed: dict[int, int], spark_end: dict[int, int]) -> None:
    for p, off in committed.items():
        assert off <= spark_end.get(p, 0), (
            f"partition {p}: group committed {off} but Spark's commit log only covers up to {spark_end.get(p, 0)}")


class CommitMonitor:
    """Background thread: polls the group's committed offsets, then Spark's commit log, and records any moment the
    group is ahead of Spark (group read first, so a batch committed in between cannot cause a false alarm)."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int, checkpoint: str) -> None:
        import threading

        self.args = (bootstrap, group, topic, partitions)
        self.checkpoint = checkpoint
        self.topic = topic
        self.violations: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "CommitMonitor":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        bootstrap, group, topic, partitions = self.args
        while not self._stop.is_set():
            try:
                committed = committed_offsets(bootstrap, group, topic, partitions)
            except Exception:  # broker briefly unavailable: no sample
                self._stop.wait(0.2)
                continue
            _, end = last_committed_end(self.checkpoint, topic)
            self.samples += 1
            for p, off in committed.items():
                if off > end.get(p, 0):
                    self.violations.append(f"p{p}: committed {off} > spark {end.get(p, 0)}")
            self._stop.wait(0.05)


def read_committed(bootstrap: str, topic: str, timeout: float = 60.0, isolation: str = "read_committed"
                   ) -> list[tuple[int, Optional[bytes], bytes, list]]:
    """Every record of ``topic`` a ``read_committed`` consumer sees: (partition, key, value, headers), read up to
    each partition's last stable offset (an open transaction stops the read there, as it stops real consumers).
    ``isolation="read_uncommitted"`` reads everything in the log instead, records of open and aborted transactions
    included."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": "false",
                  "isolation.level": isolation, "enable.partition.eof": "true", "logger": _QUIET})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, -2) for p in parts])  # -2 = beginning
        at_end: set[int] = set()
        out: list = []
        deadline = time.monotonic() + timeout
        while len(at_end) < len(parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach the end of partitions {set(parts) - at_end}")
            for m in c.consume(1000, timeout=0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise RuntimeError(m.error())
                at_end.discard(m.partition())
                out.append((m.partition(), m.key(), m.value(), m.headers() or []))
        return out
    finally:
        c.close()
