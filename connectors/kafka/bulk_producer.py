"""The sink's bulk path: a librdkafka producer fed a slice of Arrow columns per call.

The Python path hands librdkafka one record per ``Producer.produce()`` call (``sink_records.produce_batches``), after
turning the Arrow columns into Python bytes. That call is most of what the Python worker spends per record. Here,
for the common input (columns ``value`` and optionally ``key``, binary or string, the topic from option ``topic``),
the pointers and lengths of a slice of rows are computed from the Arrow buffers with numpy and the whole slice goes
to ``rd_kafka_produce_batch`` in one call; librdkafka copies every payload and key before it returns, so the Arrow
batch need not outlive the call. Exactly-once writes run their transaction on the same handle.

This is a declared twin of the Python path, which stays the definition: same librdkafka configuration (so the same
partitioner picks the same partition for a key), same record contents (a null column value is a null payload or key,
an empty one an empty payload or key), same order within a partition (``rd_kafka_produce_batch`` refuses every
record after the first that finds the local queue full, so the refused ones are a suffix that is produced again
after room is made), same transaction calls and errors (librdkafka's ``rd_kafka_error_t`` becomes confluent-kafka's
``KafkaError`` with the same flags). ``tests/connectors/test_kafka_bulk_producer.py`` writes the same input both
ways, with both delivery guarantees, and compares the topics and the errors. Delivery failures reach the same
:class:`~connectors.kafka.sink_producers.DeliveryErrors`. Inputs with a ``topic``, ``partition`` or ``headers``
column, and ``KEYEDSTATE_PURE_PYTHON=1``, use the Python path.
"""

from __future__ import annotations

import ctypes
import logging
import weakref
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np
from confluent_kafka import KafkaError, KafkaException

from connectors.kafka import librdkafka as rdk
from connectors.kafka.errors import KafkaConfigurationError
from connectors.kafka.sink_records import ROOM_WAIT_S
from keyedstate.redaction import REDACTED, is_secret, redact_text, secret_values

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BulkProducer", "bulk_path_available", "takes_columns", "MESSAGE_DTYPE"]

#: ``rd_kafka_message_t`` as a numpy record: a slice of rows becomes one array of these.
MESSAGE_DTYPE = np.dtype(rdk.Message)

#: Where an empty, non-null value or key points when its column has no data buffer: librdkafka tells an empty
#: payload from a null one by the pointer alone.
_EMPTY = ctypes.create_string_buffer(1)
_EMPTY_ADDRESS = ctypes.addressof(_EMPTY)

#: librdkafka's syslog levels as logging levels (as confluent-kafka maps them).
_LOG_LEVELS = (logging.CRITICAL, logging.CRITICAL, logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO,
               logging.INFO, logging.DEBUG)

#: Configuration keys that are confluent-kafka's Python callbacks, not librdkafka properties.
_PYTHON_ONLY_KEYS = frozenset({"on_delivery", "logger", "error_cb", "stats_cb", "throttle_cb", "oauth_cb",
                               "on_commit"})


def bulk_path_available() -> bool:
    """True when librdkafka's C API is reachable (see :mod:`connectors.kafka.librdkafka`)."""
    return rdk.LIBRARY is not None


def takes_columns(schema: "pa.Schema") -> bool:
    """True when every row of ``schema`` can go through :meth:`BulkProducer.produce_columns`: no ``topic``,
    ``partition`` or ``headers`` column, and ``value`` (and ``key``, if present) plain binary or string."""
    import pyarrow as pa

    names = {name.lower(): name for name in schema.names}
    if {"topic", "partition", "headers"} & names.keys() or "value" not in names:
        return False
    plain = (pa.binary(), pa.string(), pa.large_binary(), pa.large_string())
    return all(schema.field(names[n]).type in plain for n in ("value", "key") if n in names)


class BulkProducer:
    """A librdkafka producer created from a confluent-kafka configuration dict; see the module docstring.

    ``on_delivery_error(err, topic)`` is called, from :meth:`poll`/:meth:`flush`, for every record whose delivery
    failed. ``logger`` receives librdkafka's log lines (served by the same calls)."""

    def __init__(self, config: dict, on_delivery_error: Callable[[KafkaError, str], None],
                 logger: logging.Logger) -> None:
        lib = rdk.LIBRARY
        if lib is None:
            raise RuntimeError("librdkafka's C API is not available; use the Python path")
        self._lib = lib
        self._topics: dict[str, int] = {}
        # The callbacks must live as long as the handle: librdkafka keeps only their addresses.
        self._on_delivery_report = rdk.DeliveryReportCallback(self._delivery_report)
        self._on_log = rdk.LogCallback(self._log)
        self._on_delivery_error = on_delivery_error
        self._logger = logger
        self._rk = self._create(config)
        # (the callbacks ride along so that they outlive the handle even when this object is collected first)
        self._finalizer = weakref.finalize(self, _destroy, lib, self._rk, self._topics,
                                           (self._on_delivery_report, self._on_log))

    def _create(self, config: dict) -> int:
        lib = self._lib
        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        properties = {k: v for k, v in config.items() if k not in _PYTHON_ONLY_KEYS}
        properties["log.queue"] = True  # log lines are served by poll() in the calling thread
        for name, value in properties.items():
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            result = lib.rd_kafka_conf_set(conf, name.encode(), text.encode(), errstr, len(errstr))
            if result != rdk.CONF_OK:
                lib.rd_kafka_conf_destroy(conf)
                # a misspelled name may be a misspelled secret's: only a known property that is none shows its value
                shown = REDACTED if result == rdk.CONF_UNKNOWN or is_secret(name, text) else text
                raise KafkaConfigurationError(
                    f"librdkafka rejected the sink's producer configuration: "
                    f"{redact_text(errstr.value.decode(), secret_values(properties))}; fix or remove "
                    f"option kafka.{name}={shown!r}")
        lib.rd_kafka_conf_set_dr_msg_cb(conf, self._on_delivery_report)
        lib.rd_kafka_conf_set_log_cb(conf, self._on_log)
        rk = lib.rd_kafka_new(rdk.PRODUCER, conf, errstr, len(errstr))  # owns conf from here on, if it succeeds
        if not rk:
            lib.rd_kafka_conf_destroy(conf)
            raise KafkaConfigurationError(f"librdkafka could not create a producer: "
                                          f"{redact_text(errstr.value.decode(), secret_values(properties))}")
        lib.rd_kafka_set_log_queue(rk, None)
        return rk

    # -- callbacks (run inside poll/flush, in the calling thread) --

    def _delivery_report(self, _rk: Optional[int], message: ctypes._Pointer[rdk.Message],
                         _opaque: Optional[int]) -> None:
        report = message.contents
        if report.err:
            topic = self._lib.rd_kafka_topic_name(report.rkt).decode()
            self._on_delivery_error(KafkaError(report.err, rdk.error_string(report.err)), topic)

    def _log(self, _rk: Optional[int], level: int, facility: bytes, text: bytes) -> None:
        self._logger.log(_LOG_LEVELS[min(max(level, 0), 7)], "%s %s", facility.decode(errors="replace"),
                         text.decode(errors="replace"))

    # -- producing --

    def _topic(self, name: str) -> int:
        rkt = self._topics.get(name)
        if rkt is None:
            rkt = self._lib.rd_kafka_topic_new(self._rk, name.encode(), None)
            if not rkt:
                raise KafkaConfigurationError(f"librdkafka refused topic name {name!r}; fix option topic")
            self._topics[name] = rkt
        return rkt

    def produce_columns(self, topic: str, values: "pa.Array", keys: Optional["pa.Array"]) -> None:
        """Produce one record per row (``keys`` None: no keys), in row order. Waits for room while librdkafka's
        local queue is full. A record librdkafka refuses for another reason raises ``KafkaException``; the rows
        before it are produced."""
        messages = np.zeros(len(values), MESSAGE_DTYPE)
        _point_at(messages, "payload", "len", values)
        if keys is not None:
            _point_at(messages, "key", "key_len", keys)
        rkt = self._topic(topic)
        start, count = 0, len(messages)
        while start < count:
            pending = messages[start:]
            produced = self._lib.rd_kafka_produce_batch(rkt, rdk.PARTITION_UA, rdk.MSG_F_COPY, pending.ctypes.data,
                                                        count - start)
            if produced == count - start:
                return
            first_refused = int(np.flatnonzero(pending["err"])[0])
            code = int(pending["err"][first_refused])
            if code != rdk.ERR_QUEUE_FULL:
                raise KafkaException(KafkaError(code, rdk.error_string(code)))
            # From a full queue on, librdkafka refused every later record of the call: go on from the first.
            start += first_refused
            self.poll(ROOM_WAIT_S)

    def poll(self, timeout_s: float) -> int:
        """Serve delivery reports and log lines; returns how many events were served."""
        return self._lib.rd_kafka_poll(self._rk, _ms(timeout_s))

    def flush(self, timeout_s: float) -> int:
        """Wait until every record is delivered or failed, at most ``timeout_s``; returns how many are left."""
        self._lib.rd_kafka_flush(self._rk, _ms(timeout_s))
        return self._lib.rd_kafka_outq_len(self._rk)

    def topic_error(self, topic: str, timeout_s: float) -> Optional[KafkaError]:
        """The brokers' metadata error for ``topic`` (None: it exists); raises ``KafkaException`` when the metadata
        request itself fails."""
        metadata = ctypes.POINTER(rdk.Metadata)()
        code = self._lib.rd_kafka_metadata(self._rk, 0, self._topic(topic), ctypes.byref(metadata),
                                           _ms(timeout_s))
        if code:
            raise KafkaException(KafkaError(code, rdk.error_string(code)))
        try:
            md = metadata.contents
            for i in range(md.topic_cnt):
                entry = md.topics[i]
                if entry.topic.decode() == topic:
                    return KafkaError(entry.err, rdk.error_string(entry.err)) if entry.err else None
        finally:
            self._lib.rd_kafka_metadata_destroy(metadata)
        return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"no metadata for {topic}")

    # -- transactions (a configuration with transactional.id; librdkafka's semantics, as confluent-kafka's) --

    def init_transactions(self, timeout_s: float) -> None:
        """Fence older producers with the same ``transactional.id`` and abort the transaction they left open."""
        rdk.raise_for_error(self._lib.rd_kafka_init_transactions(self._rk, _ms(timeout_s)))

    def begin_transaction(self) -> None:
        rdk.raise_for_error(self._lib.rd_kafka_begin_transaction(self._rk))

    def send_offsets_to_transaction(self, offsets: list, group_id: str, timeout_s: float) -> None:
        """Commit ``offsets`` (confluent-kafka ``TopicPartition``s) for consumer group ``group_id`` with the open
        transaction. The group has no members, so its metadata is the group id alone (generation -1), which is
        what confluent-kafka's ``consumer_group_metadata()`` gives for a consumer that never subscribed."""
        lib = self._lib
        partitions = lib.rd_kafka_topic_partition_list_new(len(offsets))
        group = lib.rd_kafka_consumer_group_metadata_new(group_id.encode())
        try:
            for tp in offsets:
                lib.rd_kafka_topic_partition_list_add(partitions, tp.topic.encode(), tp.partition).contents.offset = \
                    tp.offset
            rdk.raise_for_error(lib.rd_kafka_send_offsets_to_transaction(self._rk, partitions, group,
                                                                         _ms(timeout_s)))
        finally:
            lib.rd_kafka_consumer_group_metadata_destroy(group)
            lib.rd_kafka_topic_partition_list_destroy(partitions)

    def commit_transaction(self, timeout_s: float) -> None:
        """Flush the transaction's records and commit it."""
        rdk.raise_for_error(self._lib.rd_kafka_commit_transaction(self._rk, _ms(timeout_s)))

    def abort_transaction(self, timeout_s: float) -> None:
        rdk.raise_for_error(self._lib.rd_kafka_abort_transaction(self._rk, _ms(timeout_s)))

    def purge(self) -> None:
        """Drop every record not yet delivered (their delivery reports say purged)."""
        self._lib.rd_kafka_purge(self._rk, rdk.PURGE_F_QUEUE | rdk.PURGE_F_INFLIGHT)

    def close(self) -> None:
        """Destroy the handle (records not delivered yet are dropped: flush first); idempotent."""
        self._finalizer()


def _ms(timeout_s: float) -> int:
    return int(timeout_s * 1000)


def _destroy(lib: ctypes.CDLL, rk: int, topics: dict, _callbacks: tuple) -> None:
    for rkt in topics.values():
        lib.rd_kafka_topic_destroy(rkt)
    topics.clear()
    lib.rd_kafka_destroy(rk)


def _point_at(messages: np.ndarray, pointer: str, length: str, column: "pa.Array") -> None:
    """Fill ``messages[pointer]``/``messages[length]`` with the address and size of each row of a binary or string
    column (null rows: a null pointer)."""
    import pyarrow as pa

    if column.null_count == len(column):
        return
    _, offsets_buffer, data_buffer = column.buffers()
    wide = pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32,
                            count=column.offset + len(column) + 1)[column.offset:]
    base = data_buffer.address if data_buffer is not None and data_buffer.address else _EMPTY_ADDRESS
    messages[length] = np.diff(offsets)
    messages[pointer] = offsets[:-1].astype(np.uint64) + np.uint64(base)
    if column.null_count:
        nulls = column.is_null().to_numpy(zero_copy_only=False)
        messages[pointer][nulls] = 0
        messages[length][nulls] = 0
