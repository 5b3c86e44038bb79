"""Helpers shared by the Kafka connector tests (topic creation, producing, reading group offsets)."""

from __future__ import annotations

import time
import uuid
from typing import Callable, Optional

def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, partitions: int, replication: int = 1, name: Optional[str] = None,
                 config: Optional[dict] = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = name or unique("t")
    admin = AdminClient({"bootstrap.servers": bootstrap})
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

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 20, "enable.idempotence": "true",
                  "batch.num.messages": 10000})
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
    """The group's committed offsets per partition (absent = none), via the AdminClient."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]
    res = admin.list_consumer_group_offsets(req, request_timeout=15)[group].result(timeout=20)
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def wait_for(predicate: Callable[[], bool], timeout: float, message: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for: {message}")
