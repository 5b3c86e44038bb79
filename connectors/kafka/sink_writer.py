"""One Spark write task of the ``keyedstate-kafka`` sink: the records of one partition of one micro-batch.

Runs on executors (``KafkaStreamWriter.write``). Exactly-once protocol, per Spark partition ``p`` of batch ``b``:

1. A transactional producer with ``transactional.id = <prefix>-<query id>-<p>`` calls ``init_transactions``. Every
   attempt of partition ``p`` (retries, speculative copies, the replay after a restart) uses the same id, so this
   fences every older producer of ``p`` and aborts the transaction it left open.
2. The partition's progress marker is read: the consumer group named like the transactional id has a committed
   offset ``m`` on partition 0 of the progress topic; batches ``< m`` of ``p`` are already in Kafka. If ``b < m``
   the task writes nothing (the batch is a replay) and only drains its input.
3. Otherwise it begins a transaction, produces the records, adds ``offset = b + 1`` for its group to the same
   transaction (``send_offsets_to_transaction``) and commits. Records and marker become visible together.

At-least-once mode produces with an idempotent producer and waits until every record is acknowledged. Both modes
produce through the bulk path (:mod:`connectors.kafka.bulk_producer`) when the input allows.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark.sql.datasource import WriterCommitMessage

from connectors.kafka import error_codes
from connectors.kafka.bulk_producer import BulkProducer, bulk_path_available, takes_columns
from connectors.kafka.errors import KafkaConnectorError, TransactionTimeoutError
from connectors.kafka.retry import RetryBudget, call_with_retry
from connectors.kafka.sink_options import KafkaSinkOptions
from connectors.kafka.sink_producers import DeliveryErrors, borrow, close_client, create_producer, give_back
from connectors.kafka.sink_records import produce_batches, produce_column_batches

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SinkTask", "KafkaSinkCommitMessage", "current_task", "write_task"]

log = logging.getLogger("keyedstate.connectors.kafka.sink")

#: How long a pooled producer trusts that a topic it checked still exists. A topic deleted within that time fails
#: the task later, when librdkafka reports its records as undeliverable (UnknownTopicError all the same).
KNOWN_TOPIC_TTL_S = 60.0


@dataclass(frozen=True)
class SinkTask:
    """Which query, batch and Spark partition a write task belongs to."""

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int = 0


@dataclass
class KafkaSinkCommitMessage(WriterCommitMessage):
    """What one write task reports to the driver's ``commit``/``abort``."""

    partition_id: int
    batch_id: int
    records: int
    #: True when the partition's progress marker showed the batch already written (a replay): nothing produced.
    already_written: bool = False


def current_task(allow_batch: bool = False) -> SinkTask:
    """The running Spark task's query id, batch id and partition. Spark sets the first two as task-local properties
    for the jobs of a micro-batch, ``foreachBatch`` included; ``allow_batch`` accepts a task outside any streaming
    query (batch id -1)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise KafkaConnectorError("the keyedstate-kafka sink's write() must run inside a Spark task")
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    query = ctx.getLocalProperty("sql.streaming.queryId")
    if batch is None or query is None:
        if allow_batch:
            return SinkTask(query_id="batch", batch_id=-1, partition_id=ctx.partitionId(),
                            attempt=ctx.attemptNumber())
        raise KafkaConnectorError(
            "deliveryGuarantee=exactly_once needs a streaming query's batch id: use df.writeStream, or df.write "
            "inside foreachBatch; for other batch writes set deliveryGuarantee=at_least_once")
    return SinkTask(query_id=query, batch_id=int(batch), partition_id=ctx.partitionId(), attempt=ctx.attemptNumber())


def write_task(opts: KafkaSinkOptions, batches: Iterator["pa.RecordBatch"], task: SinkTask) -> KafkaSinkCommitMessage:
    """Write one task's rows according to ``opts.delivery_guarantee``; see the module docstring."""
    batches = iter(batches)
    first = next((b for b in batches if b.num_rows), None)
    if first is None:  # nothing to write; an earlier attempt had nothing either (same input)
        return KafkaSinkCommitMessage(task.partition_id, task.batch_id, 0)
    rows = chain((first,), batches)
    bulk = bulk_path_available() and opts.topic is not None and takes_columns(first.schema)
    if opts.exactly_once:
        return _TransactionalWrite(opts, task, bulk).run(rows)
    return _write_at_least_once(opts, task, rows, bulk)


def _topic_error(producer: "Producer | BulkProducer", topic: str, timeout_s: float) -> Optional[KafkaError]:
    """The brokers' metadata error for ``topic``, None when it exists."""
    if isinstance(producer, BulkProducer):
        return producer.topic_error(topic, timeout_s)
    md = producer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if md is None:
        return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"no metadata for {topic}")
    return md.error


def _topic_checker(producer: "Producer | BulkProducer", opts: KafkaSinkOptions, budget: RetryBudget,
                   known: Optional[dict[str, float]] = None) -> Callable[[str], None]:
    """``check(topic)`` asks the brokers whether ``topic`` exists (with retries). ``known``: topic -> when a pooled
    producer last found it, so that consecutive tasks skip the metadata round trip for KNOWN_TOPIC_TTL_S."""
    timeout_s = opts.request_timeout_ms / 1000

    def check(topic: str) -> None:
        if known is not None and time.monotonic() - known.get(topic, -KNOWN_TOPIC_TTL_S) < KNOWN_TOPIC_TTL_S:
            return

        def once() -> None:
            error = _topic_error(producer, topic, timeout_s)
            if error is not None:
                raise KafkaException(error)

        call_with_retry(once, budget, topic=f"topic {topic!r}", action="writing (checking that the topic exists)")
        if known is not None:
            known[topic] = time.monotonic()

    return check


def _produce(producer: "Producer | BulkProducer", rows: Iterator["pa.RecordBatch"], opts: KafkaSinkOptions,
             check_topic: Callable[[str], None]) -> int:
    """Produce every row through the producer's path; returns how many."""
    if isinstance(producer, BulkProducer):
        assert opts.topic is not None  # write_task takes the bulk path only with option topic
        return produce_column_batches(producer, rows, opts.topic, check_topic)
    return produce_batches(producer, rows, opts.topic, check_topic)


def _raise_if_deleted(producer: "Producer | BulkProducer", opts: KafkaSinkOptions, topic: str) -> None:
    """Records failed after the topic check was skipped (KNOWN_TOPIC_TTL_S): if the topic is gone, say so rather
    than "timed out". One metadata request; if it fails too, the delivery failure is reported as it is."""
    try:
        error = _topic_error(producer, topic, opts.request_timeout_ms / 1000)
    except KafkaException:
        return
    if error is not None and error_codes.is_unknown_topic(error):
        raise error_codes.translate(error, brokers=opts.bootstrap_servers, topic=f"topic {topic!r}",
                                    action="writing (the topic was deleted after the task's producer checked it)")


def _raise_delivery_error(deliveries: DeliveryErrors, opts: KafkaSinkOptions, cause: Optional[BaseException]) -> None:
    if deliveries.error is not None:
        err, topic = deliveries.error
        raise error_codes.translate(err, brokers=opts.bootstrap_servers, topic=f"topic {topic!r}",
                                    action=f"writing ({deliveries.failed} records failed)",
                                    security_protocol=opts.kafka.get("security.protocol")) from cause


def _write_at_least_once(opts: KafkaSinkOptions, task: SinkTask, rows: Iterator["pa.RecordBatch"], bulk: bool
                         ) -> KafkaSinkCommitMessage:
    budget = RetryBudget(opts.broker_retry_timeout_ms, opts.retry_backoff_ms, opts.bootstrap_servers,
                         security_protocol=opts.kafka.get("security.protocol"))
    entry = borrow(opts, bulk)  # the worker's previous task's producer, if any (connectors/kafka/sink_producers.py)
    producer, deliveries = entry.producer, entry.deliveries
    check_topic = _topic_checker(producer, opts, budget, entry.known_topics)
    where = f"topic {opts.topic!r}" if opts.topic else "the sink's topics"
    clean = False
    try:
        try:
            count = _produce(producer, rows, opts, check_topic)
        except KafkaException as refused:  # librdkafka refused a record when it was handed over (e.g. too large)
            raise error_codes.translate(refused, brokers=opts.bootstrap_servers, topic=where,
                                        action="writing") from refused
        # message.timeout.ms bounds every record's delivery, so this returns; the margin covers the last reports.
        remaining = producer.flush(opts.broker_retry_timeout_ms / 1000 + 30)
        if deliveries.error is not None and entry.known_topics:
            entry.known_topics.clear()
            _raise_if_deleted(producer, opts, deliveries.error[1])
        _raise_delivery_error(deliveries, opts, None)
        if remaining:
            raise error_codes.translate(KafkaException(error_codes.no_progress_error().args[0]),
                                        brokers=opts.bootstrap_servers, topic=f"topic {opts.topic!r}",
                                        action=f"writing ({remaining} records unacknowledged)")
        clean = True
    finally:
        if clean:
            give_back(entry)
        else:
            close_client(producer)
    log.info("batch %d partition %d: %d records written at least once%s", task.batch_id, task.partition_id, count,
             " (bulk path)" if bulk else "")
    return KafkaSinkCommitMessage(task.partition_id, task.batch_id, count)


class _TransactionalWrite:
    """Steps 1-3 of the module docstring for one task attempt."""

    def __init__(self, opts: KafkaSinkOptions, task: SinkTask, bulk: bool) -> None:
        assert opts.transactional_id_prefix is not None and opts.progress_topic is not None
        self.opts = opts
        self.progress_topic = opts.progress_topic
        self.task = task
        self.bulk = bulk
        self.transactional_id = opts.transactional_id(task.query_id, task.partition_id)
        self.budget = RetryBudget(opts.broker_retry_timeout_ms, opts.retry_backoff_ms, opts.bootstrap_servers,
                                  security_protocol=opts.kafka.get("security.protocol"))
        self.timeout_s = opts.request_timeout_ms / 1000
        self.where = f"topic {opts.topic!r}" if opts.topic else "the sink's topics"
        self.deliveries = DeliveryErrors()

    def run(self, rows: Iterator["pa.RecordBatch"]) -> KafkaSinkCommitMessage:
        producer = create_producer(self.opts, self.deliveries, self.bulk, self.transactional_id)
        marker = Consumer(self.opts.marker_consumer_config(self.transactional_id))
        warm_up = self._start_marker_warm_up(marker)
        try:
            try:
                call_with_retry(lambda: producer.init_transactions(self.timeout_s), self.budget, topic=self.where,
                                action="writing (initialising transactions)")
            finally:
                warm_up.join()
            written_up_to = self._read_marker(marker)
            if written_up_to > self.task.batch_id:
                for _ in rows:  # consume the input anyway: upstream stateful operators commit at its end
                    pass
                log.info("batch %d partition %d: already in Kafka (progress marker %d of %s); writing nothing",
                         self.task.batch_id, self.task.partition_id, written_up_to, self.transactional_id)
                return KafkaSinkCommitMessage(self.task.partition_id, self.task.batch_id, 0, already_written=True)
            count = self._write_transaction(producer, marker, rows)
        finally:
            close_client(marker)
            close_client(producer)
        log.info("batch %d partition %d: %d records committed in transaction %s%s", self.task.batch_id,
                 self.task.partition_id, count, self.transactional_id, " (bulk path)" if self.bulk else "")
        return KafkaSinkCommitMessage(self.task.partition_id, self.task.batch_id, count)

    def _start_marker_warm_up(self, marker: Consumer) -> threading.Thread:
        """Connect the marker consumer to its group coordinator while ``init_transactions`` runs, and throw the
        answer away. The read that counts must follow ``init_transactions``: an older attempt can commit its batch
        until it is fenced, and only a read after the fence is sure to see that. Only the connection set-up (a few
        round trips, as long as ``init_transactions`` itself) can run alongside."""
        tp = TopicPartition(self.progress_topic, 0)

        def warm_up() -> None:
            try:
                marker.committed([tp], timeout=self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - the real read below retries and reports
                log.debug("warming up the progress-marker consumer of %s failed: %s", self.transactional_id, exc)

        thread = threading.Thread(target=warm_up, name=f"keyedstate-kafka-sink-marker-{self.task.partition_id}",
                                  daemon=True)
        thread.start()
        return thread

    def _read_marker(self, marker: Consumer) -> int:
        """The partition's progress marker: 1 + the last batch it committed (0 = none)."""
        tp = TopicPartition(self.progress_topic, 0)

        def once() -> int:
            (res,) = marker.committed([tp], timeout=self.timeout_s)
            if res.error is not None:
                raise KafkaException(res.error)
            return max(0, int(res.offset))

        return call_with_retry(once, self.budget, topic=f"topic {self.progress_topic!r}",
                               action=f"writing (reading progress marker of group {self.transactional_id!r})")

    def _write_transaction(self, producer: "Producer | BulkProducer", marker: Consumer,
                           rows: Iterator["pa.RecordBatch"]) -> int:
        started = time.monotonic()
        producer.begin_transaction()
        try:
            count = _produce(producer, rows, self.opts, _topic_checker(producer, self.opts, self.budget))
            # the marker's group: the bulk path passes its id (an unsubscribed consumer's metadata is the id alone)
            group = self.transactional_id if isinstance(producer, BulkProducer) else marker.consumer_group_metadata()
            progress = [TopicPartition(self.progress_topic, 0, self.task.batch_id + 1)]
            self._retry_in_transaction(
                lambda: producer.send_offsets_to_transaction(progress, group, self.timeout_s),
                "writing (adding the progress marker)")
            self._retry_in_transaction(lambda: producer.commit_transaction(self.timeout_s),
                                       "writing (committing the transaction)")
        except Exception as failure:  # noqa: BLE001 - aborted, then re-raised as our error
            abort_failure = self._abort(producer, failure)
            # librdkafka's generic fatal error names its cause only on the next call: here, the abort
            exc = abort_failure if error_codes.is_generic_fatal(failure) and abort_failure is not None else failure
            if error_codes.is_fenced(exc) and time.monotonic() - started > self.opts.transaction_timeout_ms / 1000:
                raise TransactionTimeoutError(
                    f"the transaction of {self.transactional_id} ran {time.monotonic() - started:.1f} s, longer than "
                    f"kafka.transaction.timeout.ms={self.opts.transaction_timeout_ms}, and the broker aborted it; "
                    f"raise that option (up to the brokers' transaction.max.timeout.ms) or write smaller batches "
                    f"(e.g. maxOffsetsPerTrigger on the source)") from exc
            _raise_delivery_error(self.deliveries, self.opts, exc)
            if isinstance(exc, KafkaConnectorError) or error_codes.kafka_error_of(exc) is None:
                raise
            raise error_codes.translate(exc, brokers=self.opts.bootstrap_servers, topic=self.where,
                                        action="writing (in a transaction)") from exc
        return count

    def _retry_in_transaction(self, fn: Callable[[], None], action: str) -> None:
        """Repeat a transactional call while librdkafka says it may be retried (coordinator moving, timeout)."""
        while True:
            try:
                fn()
            except KafkaException as exc:
                if not error_codes.is_retriable_txn_error(exc):
                    raise
                self.budget.failed(exc, topic=self.where, action=action)
                continue
            self.budget.succeeded()
            return

    def _abort(self, producer: "Producer | BulkProducer", cause: BaseException) -> Optional[BaseException]:
        """Abort the open transaction if librdkafka still allows it (a fenced or fatal producer's transaction is
        aborted by the next attempt's ``init_transactions``, or by ``transaction.timeout.ms``); returns the abort's
        own failure, if any."""
        err = error_codes.kafka_error_of(cause)
        if err is not None and err.fatal():
            return None
        try:
            producer.abort_transaction(self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the original failure is what matters
            log.warning("aborting the transaction of %s after %s failed too: %s", self.transactional_id, cause, exc)
            return exc
        return None
