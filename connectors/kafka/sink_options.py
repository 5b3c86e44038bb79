"""Parsing and validation of the ``keyedstate-kafka`` sink options (``df.writeStream.format("keyedstate-kafka")``).

Option names follow Spark's built-in Kafka sink where they overlap (``kafka.bootstrap.servers``, ``topic``,
``kafka.*`` passed to the client) and Flink's ``KafkaSink`` for the delivery guarantee. Parsing runs when the query
starts (``streamWriter`` in a Spark planner worker, so mistakes fail ``start()``) and the result is shipped to the
write tasks.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from connectors.kafka.errors import KafkaConfigurationError
from connectors.kafka.option_values import bool_option, int_option, retry_options, split_options

__all__ = ["EXACTLY_ONCE", "AT_LEAST_ONCE", "KafkaSinkOptions", "parse_sink_options"]

EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"

#: Options the sink understands (lower-cased); anything else that is not ``kafka.*`` is rejected.
KNOWN = {
    "kafka.bootstrap.servers", "topic", "deliveryguarantee", "transactionalidprefix", "progresstopic",
    "brokerretrytimeoutms", "retrybackoffms", "requesttimeoutms", "path",
    "checkpointlocation",  # Spark hands the writeStream options, checkpointLocation included, to the sink
}

#: librdkafka properties the sink sets itself.
FORBIDDEN_KAFKA = {"transactional.id"}

#: librdkafka's bounds for ``transaction.timeout.ms``; brokers additionally cap it at ``transaction.max.timeout.ms``
#: (15 minutes by default).
TRANSACTION_TIMEOUT_RANGE = (1_000, 2_147_483_647)
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000

#: Producer-only librdkafka properties: left out of the progress-marker consumer's configuration (librdkafka warns
#: about every producer property a consumer is given).
PRODUCER_ONLY = {
    "acks", "request.required.acks", "linger.ms", "queue.buffering.max.ms", "batch.size", "batch.num.messages",
    "compression.type", "compression.codec", "compression.level", "message.timeout.ms", "delivery.timeout.ms",
    "transaction.timeout.ms", "enable.idempotence", "partitioner", "queue.buffering.max.messages",
    "queue.buffering.max.kbytes", "retries", "message.send.max.retries", "max.in.flight",
    "max.in.flight.requests.per.connection", "sticky.partitioning.linger.ms", "enable.gapless.guarantee",
    "request.timeout.ms",
}

log = logging.getLogger("keyedstate.connectors.kafka.sink")

_PREFIX_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")

#: librdkafka's two names of the number of requests in flight per broker connection.
IN_FLIGHT_ALIASES = frozenset({"max.in.flight.requests.per.connection", "max.in.flight"})


@dataclass(frozen=True)
class KafkaSinkOptions:
    """Validated options of one sink instance."""

    bootstrap_servers: str
    topic: Optional[str] = None
    delivery_guarantee: str = EXACTLY_ONCE
    transactional_id_prefix: Optional[str] = None
    progress_topic: Optional[str] = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    broker_retry_timeout_ms: int = 120_000
    retry_backoff_ms: int = 500
    request_timeout_ms: int = 10_000
    kafka: dict[str, str] = field(default_factory=dict)

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == EXACTLY_ONCE

    def transactional_id(self, query_id: str, partition_id: int) -> str:
        """The ``transactional.id`` of Spark write partition ``partition_id``: the same for every attempt and
        every batch of that partition in that query, so a new attempt fences the older ones. It names the
        partition's progress-marker consumer group too."""
        return f"{self.transactional_id_prefix}-{query_id}-{partition_id}"

    def producer_config(self, transactional_id: Optional[str] = None,
                        on_delivery_error: Optional[Callable] = None) -> dict:
        """librdkafka producer configuration; ``on_delivery_error(err, msg)`` is called for failed records only."""
        conf: dict = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": "keyedstate-kafka-sink",
            # Java's default partitioner (murmur2 of the key), as Spark's built-in sink uses: a key lands on the
            # same partition whichever sink wrote it. librdkafka's own default hashes with CRC32.
            "partitioner": "murmur2_random",
            "linger.ms": "5",
            "enable.idempotence": "true",
            # Connect to every broker the first metadata names, not only when a request needs one: with sparse
            # connections librdkafka (2.10+) drops the bootstrap connection before the coordinator's is up, and
            # init_transactions then waits for its 500 ms coordinator query timer about every other task.
            "enable.sparse.connections": "false",
        }
        if not IN_FLIGHT_ALIASES & self.kafka.keys():
            # librdkafka's idempotent producer loses records when requests to a partition are pipelined: if the
            # first request a producer sends to a partition fails with a retriable error (its leader is not ready:
            # a new topic, a leader election) and the next one succeeds, the broker accepts the gap (it has no
            # sequence of that producer for that partition yet) and librdkafka reports the failed records as
            # delivered ("implicitly acked", confluent-kafka-go#921). One request in flight per broker closes that.
            conf["max.in.flight.requests.per.connection"] = "1"
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            conf["transaction.timeout.ms"] = str(self.transaction_timeout_ms)
        conf.update(self.kafka)
        # librdkafka keeps retrying an undeliverable record until message.timeout.ms: that is the sink's broker
        # retry budget. Inside a transaction it must not exceed transaction.timeout.ms.
        budget = self.broker_retry_timeout_ms
        if transactional_id is not None:
            budget = min(budget, self.transaction_timeout_ms)
        if "message.timeout.ms" not in conf and "delivery.timeout.ms" not in conf:
            # (librdkafka applies the later of two aliases: a default added after the user's alias would win)
            conf["message.timeout.ms"] = str(max(budget, 1))
        if on_delivery_error is not None:
            # Only failures call back into Python: a callback per delivered record costs more than producing it.
            conf["on_delivery"] = on_delivery_error
            conf["delivery.report.only.error"] = True
        conf["logger"] = logging.getLogger("keyedstate.connectors.kafka.librdkafka.sink")
        conf.setdefault("log.connection.close", "false")
        return conf

    def marker_consumer_config(self, group_id: str) -> dict:
        """A consumer that never subscribes: it reads and (through the producer's transaction) carries the
        progress marker of ``group_id``. read_committed makes librdkafka ask for stable offsets only."""
        conf: dict = {"bootstrap.servers": self.bootstrap_servers, "client.id": "keyedstate-kafka-sink-progress"}
        conf.update({k: v for k, v in self.kafka.items() if k not in PRODUCER_ONLY})
        conf.update({"group.id": group_id, "enable.auto.commit": "false", "enable.auto.offset.store": "false",
                     "isolation.level": "read_committed"})
        conf["logger"] = logging.getLogger("keyedstate.connectors.kafka.librdkafka.sink")
        conf.setdefault("log.connection.close", "false")
        return conf


def parse_sink_options(options: Mapping[str, str]) -> KafkaSinkOptions:
    """Validate ``options`` (case-insensitive names, string values) and return :class:`KafkaSinkOptions`.

    Raises :class:`KafkaConfigurationError` naming the option to fix.
    """
    opts, kafka, servers = split_options(
        options, KNOWN, FORBIDDEN_KAFKA, "sink", "compression.type",
        "the sink derives transactional ids from option transactionalIdPrefix, the query id and the Spark partition")
    topic = opts.get("topic", "").strip() or None

    guarantee = opts.get("deliveryguarantee", EXACTLY_ONCE).strip().lower().replace("-", "_")
    if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
        raise KafkaConfigurationError(
            f"option deliveryGuarantee={opts['deliveryguarantee']!r} is invalid; use {EXACTLY_ONCE} or {AT_LEAST_ONCE}")
    prefix = opts.get("transactionalidprefix", "").strip() or None
    progress_topic = opts.get("progresstopic", "").strip() or None
    timeout_ms = DEFAULT_TRANSACTION_TIMEOUT_MS
    if guarantee == EXACTLY_ONCE:
        if prefix is None:
            raise KafkaConfigurationError(
                "deliveryGuarantee=exactly_once (the default) needs option transactionalIdPrefix: a name unique to "
                "this query among all writers of the cluster (e.g. 'fraud-alerts-v1'); or set "
                "deliveryGuarantee=at_least_once")
        if not _PREFIX_CHARS.match(prefix):
            raise KafkaConfigurationError(
                f"option transactionalIdPrefix={prefix!r} may only contain letters, digits, '.', '_' and '-'")
        if bool_option("kafka.enable.idempotence", kafka.get("enable.idempotence", "true")) is False:
            raise KafkaConfigurationError(
                "kafka.enable.idempotence=false contradicts deliveryGuarantee=exactly_once (transactions need the "
                "idempotent producer); remove the option")
        progress_topic = progress_topic or topic
        if progress_topic is None:
            raise KafkaConfigurationError(
                "deliveryGuarantee=exactly_once without option topic needs option progressTopic: an existing topic "
                "whose partition 0 carries the sink's per-partition progress (consumer-group offsets, no records)")
        timeout_ms = int_option("kafka.transaction.timeout.ms",
                                kafka.pop("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS)),
                                TRANSACTION_TIMEOUT_RANGE[0])
        message_timeout = kafka.get("message.timeout.ms", kafka.get("delivery.timeout.ms"))
        if message_timeout is not None and int_option("kafka.message.timeout.ms", message_timeout, 0) > timeout_ms:
            raise KafkaConfigurationError(
                f"kafka.message.timeout.ms={message_timeout} exceeds kafka.transaction.timeout.ms={timeout_ms}: a "
                "record could outlive its transaction. Lower the first or raise the second")
    elif prefix is not None or progress_topic is not None:
        raise KafkaConfigurationError(
            "options transactionalIdPrefix and progressTopic only apply to deliveryGuarantee=exactly_once; remove "
            "them or switch to exactly_once")
    _warn_if_pipelined(kafka)
    return KafkaSinkOptions(
        bootstrap_servers=servers,
        topic=topic,
        delivery_guarantee=guarantee,
        transactional_id_prefix=prefix,
        progress_topic=progress_topic,
        transaction_timeout_ms=timeout_ms,
        **retry_options(opts),
        kafka=kafka,
    )


def _warn_if_pipelined(kafka: Mapping[str, str]) -> None:
    """A user's ``max.in.flight`` above 1 brings back the loss the sink's default of 1 prevents (see
    ``KafkaSinkOptions.producer_config``): allowed, as a throughput choice, but said once when the query starts."""
    for name in IN_FLIGHT_ALIASES & kafka.keys():
        if int_option(f"kafka.{name}", kafka[name], 1) > 1:
            log.warning(
                "kafka.%s=%s lets librdkafka pipeline requests to a partition: when a new topic's or a moved "
                "partition's first request fails and the next succeeds, librdkafka reports the failed records as "
                "delivered though no broker wrote them (confluent-kafka-go#921). Remove the option to keep the "
                "sink's default of 1 unless losing records in that case is acceptable", name, kafka[name])
