"""At-least-once producers kept in a Python worker from one write task to the next.

Creating a librdkafka producer, connecting it, fetching metadata and acquiring its idempotent producer id costs
tens of milliseconds per write task, as much as producing tens of thousands of records. Spark's built-in Kafka
sink keeps its producers in the executor for the same reason (``spark.kafka.producer.cache.timeout``). Spark reuses
its Python workers (``spark.python.worker.reuse``, on by default), so an at-least-once task borrows the producer the
worker's previous task left behind when the options are the same.

A producer goes back to the pool only after a task that flushed every record without a delivery failure, so the
next task starts with an empty queue and a clean delivery record; after any failure it is purged and closed.
Exactly-once producers are never pooled: their ``transactional.id`` belongs to one write partition, and the next
task in this worker may write another partition (see docs/kafka.md, Sink limits).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from connectors.kafka import error_codes
from connectors.kafka.bulk_producer import BulkProducer
from connectors.kafka.sink_options import KafkaSinkOptions

__all__ = ["DeliveryErrors", "PooledProducer", "borrow", "create_producer", "give_back", "close_client", "pooled_count",
           "close_all", "IDLE_TIMEOUT_S", "MAX_POOLED"]

log = logging.getLogger("keyedstate.connectors.kafka.sink")

#: A pooled producer unused this long is closed (Spark's ``spark.kafka.producer.cache.timeout`` default).
IDLE_TIMEOUT_S = 600.0
#: At most this many idle producers per worker (one per distinct set of options).
MAX_POOLED = 4


class DeliveryErrors:
    """Delivery-report callback: remembers the first failure (later ones are usually the same cause)."""

    def __init__(self) -> None:
        self.error: Optional[tuple[KafkaError, str]] = None
        self.failed = 0

    def __call__(self, err: Optional[KafkaError], msg: Message) -> None:
        """confluent-kafka's ``on_delivery(err, msg)``."""
        if err is not None:
            topic = msg.topic()
            assert topic is not None  # a delivery report is of a record, which names its topic
            self.record(err, topic)

    def record(self, err: KafkaError, topic: str) -> None:
        """A record for ``topic`` failed with ``err`` (the bulk path's callback)."""
        if not error_codes.is_purged(err):
            self.failed += 1
            if self.error is None:
                self.error = (err, topic)


@dataclass
class PooledProducer:
    """An at-least-once producer (confluent-kafka's, or the bulk path's) and the callback that records its delivery
    failures."""

    producer: "Producer | BulkProducer"
    deliveries: DeliveryErrors
    key: tuple
    idle_since: float = field(default_factory=time.monotonic)
    #: topic -> when this producer last found it on the brokers (see sink_writer.KNOWN_TOPIC_TTL_S)
    known_topics: dict[str, float] = field(default_factory=dict)


_pool: "OrderedDict[tuple, PooledProducer]" = OrderedDict()
_lock = threading.Lock()


def borrow(opts: KafkaSinkOptions, bulk: bool = False) -> PooledProducer:
    """The worker's idle producer for ``opts``, or a new one; the caller owns it until :func:`give_back`.
    ``bulk``: a :class:`~connectors.kafka.bulk_producer.BulkProducer` rather than confluent-kafka's ``Producer``."""
    # everything producer_config reads for a producer without a transactional id, and which kind of producer
    key = (bulk, opts.bootstrap_servers, opts.broker_retry_timeout_ms, tuple(sorted(opts.kafka.items())))
    now = time.monotonic()
    with _lock:
        entry = _pool.pop(key, None)
        expired = [_pool.pop(k) for k in [k for k, e in _pool.items() if now - e.idle_since > IDLE_TIMEOUT_S]]
    for old in expired:
        close_client(old.producer)
    if entry is None:
        deliveries = DeliveryErrors()
        entry = PooledProducer(create_producer(opts, deliveries, bulk), deliveries, key)
    return entry


def create_producer(opts: KafkaSinkOptions, deliveries: DeliveryErrors, bulk: bool,
                    transactional_id: Optional[str] = None) -> "Producer | BulkProducer":
    """A new producer for ``opts`` whose failed deliveries reach ``deliveries``: the bulk path's or
    confluent-kafka's. A ``kafka.*`` property librdkafka rejects is a :class:`KafkaConfigurationError`."""
    config = opts.producer_config(transactional_id, on_delivery_error=deliveries)
    if bulk:
        return BulkProducer(config, deliveries.record, config["logger"])
    try:
        return Producer(config)
    except KafkaException as exc:
        raise error_codes.rejected_configuration("sink's producer", exc, config) from None


def give_back(entry: PooledProducer) -> None:
    """Return a producer whose task flushed every record and saw no delivery failure."""
    entry.idle_since = time.monotonic()
    with _lock:
        replaced = _pool.pop(entry.key, None)
        _pool[entry.key] = entry
        evicted = [_pool.popitem(last=False)[1] for _ in range(len(_pool) - MAX_POOLED)]
    for old in ([replaced] if replaced is not None else []) + evicted:
        close_client(old.producer)


def close_client(client: Producer | BulkProducer | Consumer) -> None:
    """Close a librdkafka client; a producer first drops undelivered records (after a failure there is nobody to
    deliver them to, and ``close`` would flush them). Closing a fenced producer raises its fatal error again."""
    try:
        if isinstance(client, (Producer, BulkProducer)):
            client.purge()
        client.close()
    except Exception as exc:  # noqa: BLE001 - the task's outcome is decided already
        log.debug("closing a Kafka client failed: %s", exc)


def pooled_count() -> int:
    """How many idle producers this process keeps (for tests)."""
    with _lock:
        return len(_pool)


def close_all(reason: Optional[str] = None) -> None:
    """Close every idle producer (at interpreter exit, and for tests)."""
    with _lock:
        entries = list(_pool.values())
        _pool.clear()
    for entry in entries:
        close_client(entry.producer)
    if entries and reason:
        log.debug("closed %d pooled Kafka producers: %s", len(entries), reason)


atexit.register(close_all, "interpreter exit")
