"""librdkafka's C API for the sink's bulk path: the one place that knows its functions, structs and constants.

The library is the copy confluent-kafka itself loaded: ``dlsym`` on the handle of confluent-kafka's extension module
(``confluent_kafka.cimpl``) finds symbols in the libraries it links, so this works whether the wheel bundles
librdkafka (manylinux, macOS) or links a system copy, and the process holds one librdkafka. The declarations follow
``rdkafka.h``; the structs and functions used here have kept their layout and signatures since librdkafka 1.0.

``ctypes.CDLL`` releases the GIL around every call; the callbacks (delivery reports, logs) take it again. They run
in the thread that calls ``rd_kafka_poll``/``rd_kafka_flush`` (log messages too, through ``log.queue``).

``LIBRARY`` is None when the symbols cannot be found or ``KEYEDSTATE_PURE_PYTHON`` is set; the sink then produces
through confluent-kafka's Python API.
"""

from __future__ import annotations

import ctypes
import logging
from ctypes import CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_size_t, c_void_p
from typing import Optional

from keyedstate.fastpath import pure_python_requested

__all__ = ["LIBRARY", "Message", "Metadata", "TopicPartition", "raise_for_error", "DeliveryReportCallback",
           "LogCallback", "PRODUCER", "PARTITION_UA", "MSG_F_COPY", "PURGE_F_QUEUE", "PURGE_F_INFLIGHT", "CONF_OK",
           "CONF_UNKNOWN", "ERR_QUEUE_FULL", "error_string"]

log = logging.getLogger("keyedstate.connectors.kafka.librdkafka")

PRODUCER = 0  # rd_kafka_type_t RD_KAFKA_PRODUCER
PARTITION_UA = -1  # RD_KAFKA_PARTITION_UA: the configured partitioner chooses
MSG_F_COPY = 0x2  # RD_KAFKA_MSG_F_COPY: librdkafka copies payload and key before produce returns
PURGE_F_QUEUE = 0x1
PURGE_F_INFLIGHT = 0x2
CONF_OK = 0  # rd_kafka_conf_res_t RD_KAFKA_CONF_OK
CONF_UNKNOWN = -2  # RD_KAFKA_CONF_UNKNOWN: no such property
ERR_QUEUE_FULL = -184  # RD_KAFKA_RESP_ERR__QUEUE_FULL


class Message(Structure):
    """``rd_kafka_message_t``."""

    _fields_ = [("err", c_int), ("rkt", c_void_p), ("partition", c_int32), ("payload", c_void_p),
                ("len", c_size_t), ("key", c_void_p), ("key_len", c_size_t), ("offset", c_int64),
                ("_private", c_void_p)]


class TopicPartition(Structure):
    """``rd_kafka_topic_partition_t``."""

    _fields_ = [("topic", c_char_p), ("partition", c_int32), ("offset", c_int64), ("metadata", c_void_p),
                ("metadata_size", c_size_t), ("opaque", c_void_p), ("err", c_int), ("_private", c_void_p)]


class MetadataPartition(Structure):
    """``rd_kafka_metadata_partition_t``."""

    _fields_ = [("id", c_int32), ("err", c_int), ("leader", c_int32), ("replica_cnt", c_int),
                ("replicas", POINTER(c_int32)), ("isr_cnt", c_int), ("isrs", POINTER(c_int32))]


class MetadataTopic(Structure):
    """``rd_kafka_metadata_topic_t``."""

    _fields_ = [("topic", c_char_p), ("partition_cnt", c_int), ("partitions", POINTER(MetadataPartition)),
                ("err", c_int)]


class Metadata(Structure):
    """``rd_kafka_metadata_t`` (the broker list is not read)."""

    _fields_ = [("broker_cnt", c_int), ("brokers", c_void_p), ("topic_cnt", c_int),
                ("topics", POINTER(MetadataTopic)), ("orig_broker_id", c_int32), ("orig_broker_name", c_char_p)]


#: ``void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *rkmessage, void *opaque)``
DeliveryReportCallback = CFUNCTYPE(None, c_void_p, POINTER(Message), c_void_p)
#: ``void (*log_cb)(const rd_kafka_t *rk, int level, const char *fac, const char *buf)``
LogCallback = CFUNCTYPE(None, c_void_p, c_int, c_char_p, c_char_p)

_SIGNATURES = {
    "rd_kafka_conf_new": (c_void_p, []),
    "rd_kafka_conf_destroy": (None, [c_void_p]),
    "rd_kafka_conf_set": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]),
    "rd_kafka_conf_set_dr_msg_cb": (None, [c_void_p, DeliveryReportCallback]),
    "rd_kafka_conf_set_log_cb": (None, [c_void_p, LogCallback]),
    "rd_kafka_new": (c_void_p, [c_int, c_void_p, c_char_p, c_size_t]),
    "rd_kafka_destroy": (None, [c_void_p]),
    "rd_kafka_set_log_queue": (c_int, [c_void_p, c_void_p]),
    "rd_kafka_topic_new": (c_void_p, [c_void_p, c_char_p, c_void_p]),
    "rd_kafka_topic_destroy": (None, [c_void_p]),
    "rd_kafka_topic_name": (c_char_p, [c_void_p]),
    "rd_kafka_produce_batch": (c_int, [c_void_p, c_int32, c_int, c_void_p, c_int]),
    "rd_kafka_poll": (c_int, [c_void_p, c_int]),
    "rd_kafka_flush": (c_int, [c_void_p, c_int]),
    "rd_kafka_outq_len": (c_int, [c_void_p]),
    "rd_kafka_purge": (c_int, [c_void_p, c_int]),
    "rd_kafka_metadata": (c_int, [c_void_p, c_int, c_void_p, POINTER(POINTER(Metadata)), c_int]),
    "rd_kafka_metadata_destroy": (None, [POINTER(Metadata)]),
    "rd_kafka_err2str": (c_char_p, [c_int]),
    # transactions: each call returns an rd_kafka_error_t * (NULL: success) that the caller destroys
    "rd_kafka_init_transactions": (c_void_p, [c_void_p, c_int]),
    "rd_kafka_begin_transaction": (c_void_p, [c_void_p]),
    "rd_kafka_send_offsets_to_transaction": (c_void_p, [c_void_p, c_void_p, c_void_p, c_int]),
    "rd_kafka_commit_transaction": (c_void_p, [c_void_p, c_int]),
    "rd_kafka_abort_transaction": (c_void_p, [c_void_p, c_int]),
    "rd_kafka_error_code": (c_int, [c_void_p]),
    "rd_kafka_error_string": (c_char_p, [c_void_p]),
    "rd_kafka_error_is_fatal": (c_int, [c_void_p]),
    "rd_kafka_error_is_retriable": (c_int, [c_void_p]),
    "rd_kafka_error_txn_requires_abort": (c_int, [c_void_p]),
    "rd_kafka_error_destroy": (None, [c_void_p]),
    "rd_kafka_topic_partition_list_new": (c_void_p, [c_int]),
    "rd_kafka_topic_partition_list_add": (POINTER(TopicPartition), [c_void_p, c_char_p, c_int32]),
    "rd_kafka_topic_partition_list_destroy": (None, [c_void_p]),
    "rd_kafka_consumer_group_metadata_new": (c_void_p, [c_char_p]),
    "rd_kafka_consumer_group_metadata_destroy": (None, [c_void_p]),
}


def _load() -> Optional[ctypes.CDLL]:
    if pure_python_requested():
        return None
    try:
        import confluent_kafka.cimpl as cimpl

        lib = ctypes.CDLL(cimpl.__file__)
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
    except (ImportError, OSError, AttributeError) as exc:
        log.debug("librdkafka's C API is not reachable through confluent_kafka.cimpl (%s); the sink produces "
                  "through confluent-kafka's Python API", exc)
        return None
    return lib


LIBRARY: Optional[ctypes.CDLL] = _load()
"""librdkafka with the declarations above, or None (see the module docstring)."""


def raise_for_error(error: Optional[int]) -> None:
    """Turn an ``rd_kafka_error_t *`` into confluent-kafka's ``KafkaException`` (with the error's fatal, retriable
    and abort-required flags, which the sink's error handling reads) and destroy it; NULL is success."""
    if not error:
        return
    from confluent_kafka import KafkaError, KafkaException

    assert LIBRARY is not None
    try:
        text = LIBRARY.rd_kafka_error_string(error)
        raise KafkaException(KafkaError(
            LIBRARY.rd_kafka_error_code(error), text.decode("utf-8", "replace") if text else None,
            fatal=bool(LIBRARY.rd_kafka_error_is_fatal(error)),
            retriable=bool(LIBRARY.rd_kafka_error_is_retriable(error)),
            txn_requires_abort=bool(LIBRARY.rd_kafka_error_txn_requires_abort(error))))
    finally:
        LIBRARY.rd_kafka_error_destroy(error)


def error_string(code: int) -> str:
    """librdkafka's description of an error code."""
    assert LIBRARY is not None
    text = LIBRARY.rd_kafka_err2str(code)
    return text.decode("utf-8", "replace") if text else f"error {code}"
