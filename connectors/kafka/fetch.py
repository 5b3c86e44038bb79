"""Reading one offset range of one Kafka partition on a Spark executor, as Arrow record batches.

Runs inside ``DataSourceStreamReader.read`` on executors. The range is ``[start, end)`` (``start = -2`` means the
partition's earliest offset, used for partitions discovered while the query runs). The loop assigns, seeks, consumes
in batches and stops at ``end``. It never waits for an offset that will not come: offsets skipped by compaction or
taken by transaction markers are detected through librdkafka's partition-EOF event, whose offset is the fetch
position past such gaps. Broker outages are ridden out within ``brokerRetryTimeoutMs``.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Callable, Iterator, Optional, cast

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from connectors.kafka import error_codes
from connectors.kafka.errors import KafkaDataLossError
from connectors.kafka.partition import KafkaInputPartition
from connectors.kafka.retry import RetryBudget
from connectors.kafka.source_options import KafkaOptions

__all__ = ["KafkaInputPartition", "ARROW_SCHEMA", "read_range"]

log = logging.getLogger("keyedstate.connectors.kafka.fetch")

ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])

_HEADERS_TYPE = ARROW_SCHEMA.field("headers").type

# Unbound C methods: ``map(_KEY, msgs)`` walks a consume() batch without running Python bytecode per record, which
# was the largest Python cost of a read task.
_KEY, _VALUE, _TIMESTAMP, _HEADERS, _ERROR = (Message.key, Message.value, Message.timestamp, Message.headers,
                                               Message.error)
# The offset of a record or a partition-EOF event, the only messages consume() returns here: an int (confluent-kafka
# types offset() Optional for the messages that have none, such as a produced one before its delivery).
_OFFSET = cast(Callable[[Message], int], Message.offset)


# Consumers are reused across tasks within one Python worker (workers are reused and run one task at a time).
_CONSUMERS: dict[tuple, tuple[Consumer, error_codes.ClientErrors]] = {}


def _consumer(opts: KafkaOptions) -> tuple[tuple, Consumer, error_codes.ClientErrors]:
    conf = opts.librdkafka_config("consumer")
    key = tuple(sorted(conf.items()))
    entry = _CONSUMERS.get(key)
    if entry is None:
        errors = error_codes.ClientErrors()
        entry = _CONSUMERS[key] = (Consumer({**conf, "error_cb": errors}), errors)
    return (key, *entry)


def _drop_consumer(key: tuple) -> None:
    entry = _CONSUMERS.pop(key, None)
    if entry is not None:
        try:
            entry[0].close()
        except Exception:  # noqa: BLE001 - best effort
            pass


def _to_batch(topic: str, partition: int, keys: list, values: list, offsets: list, ts: list, ts_types: list,
              headers: list) -> pa.RecordBatch:
    """``ts_types`` are librdkafka's TIMESTAMP_* codes (1 = create time, 2 = log append time); Spark's
    timestampType column is 0/1."""
    n = len(offsets)
    return pa.RecordBatch.from_arrays([
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pc.multiply(pa.array(ts, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC")),
        pc.subtract(pa.array(ts_types, pa.int32()), pa.scalar(1, pa.int32())),
        pa.nulls(n, _HEADERS_TYPE) if headers.count(None) == n else pa.array(headers, _HEADERS_TYPE),
    ], schema=ARROW_SCHEMA)


def read_range(opts: KafkaOptions, part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``part`` as Arrow batches of at most ``maxBatchRecords`` rows."""
    topic, partition, start, end = part.topic, part.partition, part.start, part.end
    if start >= 0 and start >= end:
        return
    key, consumer, errors = _consumer(opts)
    budget = RetryBudget(opts.broker_retry_timeout_ms, opts.retry_backoff_ms, opts.bootstrap_servers,
                         security_protocol=opts.kafka.get("security.protocol"), client_errors=lambda: errors.texts)
    where = f"topic {topic!r} partition {partition}"
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING if start < 0 else start)])
    ok = False
    # A task allocates millions of short-lived objects (messages, timestamp tuples) that reference counting frees;
    # none form cycles. Left on, the cyclic GC keeps rescanning the worker's heap and the pending batch lists on the
    # way, about a third of the task's CPU. Paused for the task only, and restored even if Spark abandons the read.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield from _consume(opts, consumer, budget, topic, partition, start, end, where)
        ok = True
    finally:
        if gc_was_enabled:
            gc.enable()
        if ok:
            try:
                consumer.unassign()
            except KafkaException:
                _drop_consumer(key)
        else:
            _drop_consumer(key)


def _consume(opts: KafkaOptions, consumer: Consumer, budget: RetryBudget, topic: str, partition: int, start: int,
             end: int, where: str) -> Iterator[pa.RecordBatch]:
    batch_max = opts.max_batch_records
    keys: list = []
    values: list = []
    offs: list = []
    ts: list = []
    tts: list = []
    hdrs: list = []
    position = start  # next offset we expect; -2 until the first record/EOF tells us
    stalled_since: Optional[float] = None
    last_error: Optional[BaseException] = None
    budget_s = opts.broker_retry_timeout_ms / 1000
    while position < 0 or position < end:
        # consume() waits out its timeout until it has num_messages, so never ask for more than the range still
        # holds: at the end of a range with no records after it, that wait was most of a small task's time.
        wanted = min(batch_max, 10_000) if position < 0 else min(batch_max, 10_000, end - position)
        msgs = consumer.consume(num_messages=wanted, timeout=0.5)
        progressed = False
        n = len(msgs)
        if n and msgs[-1].error() is None and _OFFSET(msgs[-1]) < end and \
                list(map(_ERROR, msgs)).count(None) == n:
            # fast path (the common case): only records, all inside the range
            first, last = _OFFSET(msgs[0]), _OFFSET(msgs[-1])
            keys += map(_KEY, msgs)
            values += map(_VALUE, msgs)
            if last - first == n - 1:  # offsets of one partition only increase, so these are exactly first..last
                offs += range(first, last + 1)
            else:  # gaps: compacted records or transaction markers
                offs += map(_OFFSET, msgs)
            t_types, stamps = zip(*map(_TIMESTAMP, msgs))
            ts += stamps
            tts += t_types
            hdrs += map(_HEADERS, msgs)
            position = last + 1
            progressed = True
            msgs = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if error_codes.is_partition_eof(err):
                    eof = _OFFSET(m)
                    if eof >= end:
                        position = end
                        progressed = True
                        break
                    if position < 0 or eof > position:
                        position = eof
                    last_error = KafkaDataLossError(
                        f"{where}: the log ends at offset {eof} but the batch needs records up to {end - 1} "
                        f"(brokers {opts.bootstrap_servers})")
                    continue
                if error_codes.is_out_of_range(err):
                    position = _out_of_range(opts, consumer, topic, partition, position, end, where, err)
                    progressed = True
                    continue
                if error_codes.is_retriable_fetch_error(err):
                    last_error = KafkaException(err)
                    continue
                raise error_codes.translate(err, brokers=opts.bootstrap_servers, topic=where,
                                            action="fetching records")
            off = _OFFSET(m)
            if off >= end:
                position = end
                progressed = True
                break
            t_type, t = m.timestamp()
            keys.append(m.key())
            values.append(m.value())
            offs.append(off)
            ts.append(t)
            tts.append(t_type)
            hdrs.append(m.headers())
            position = off + 1
            progressed = True
        if len(offs) >= batch_max or (offs and position >= end):
            yield _to_batch(topic, partition, keys, values, offs, ts, tts, hdrs)
            keys, values, offs, ts, tts, hdrs = [], [], [], [], [], []
        if progressed:
            if stalled_since is not None:
                budget.succeeded()
            stalled_since = None
            last_error = None
            continue
        now = time.monotonic()
        if stalled_since is None:
            stalled_since = now
        elif now - stalled_since >= budget_s:
            if isinstance(last_error, KafkaDataLossError):
                if opts.fail_on_data_loss:
                    raise KafkaDataLossError(
                        f"{last_error} for longer than brokerRetryTimeoutMs={opts.broker_retry_timeout_ms}: records "
                        f"were lost (topic deleted or recreated, or an unclean leader election). Set "
                        f"failOnDataLoss=false to skip them")
                log.warning("%s; failOnDataLoss=false, skipping to the end of the batch", last_error)
                break
            raise error_codes.translate(
                last_error or error_codes.no_progress_error(), brokers=opts.bootstrap_servers, topic=where,
                action="fetching records", elapsed_s=now - stalled_since, budget_ms=opts.broker_retry_timeout_ms,
                security_protocol=budget.security_protocol, client_errors=budget.client_errors())
    if offs:
        yield _to_batch(topic, partition, keys, values, offs, ts, tts, hdrs)


def _out_of_range(opts: KafkaOptions, consumer: Consumer, topic: str, partition: int, position: int, end: int,
                  where: str, err: KafkaError) -> int:
    """The fetch position is outside the log: fail (failOnDataLoss) or skip to the earliest offset still there."""
    if opts.fail_on_data_loss:
        raise error_codes.translate(err, brokers=opts.bootstrap_servers, topic=where,
                                    action=f"fetching from offset {position}")
    low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                timeout=opts.request_timeout_ms / 1000, cached=False)
    log.warning("%s: offset %d is no longer available (earliest is %d); failOnDataLoss=false, skipping the lost "
                "records", where, position, low)
    new = max(low, position)
    consumer.assign([TopicPartition(topic, partition, min(new, end))])
    return new if new < end else end
