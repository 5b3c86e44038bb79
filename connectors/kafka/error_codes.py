"""The one place that turns confluent-kafka / librdkafka errors into :mod:`connectors.kafka.errors` exceptions.

Everything else in the connector calls :func:`kafka_error_of`, :func:`is_transient` and :func:`translate`; no other
module inspects librdkafka error codes.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable, Mapping, Optional

from confluent_kafka import KafkaError, KafkaException

from connectors.kafka.errors import (
    BrokersUnavailableError,
    KafkaConfigurationError,
    KafkaConnectorError,
    KafkaDataLossError,
    KafkaRequestError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RecordTooLargeError,
    TransactionTimeoutError,
    UnknownTopicError,
)
from keyedstate.redaction import redact_text, secret_values

__all__ = ["kafka_error_of", "is_transient", "is_retriable_fetch_error", "is_unknown_topic", "is_partition_eof",
           "is_out_of_range", "no_progress_error", "translate", "is_fenced", "is_retriable_txn_error",
           "is_purged", "rejected_configuration", "ClientErrors", "listener_hint",
           "is_group_not_found", "is_group_in_use"]

#: Errors that mean "brokers (or a leader/coordinator) are not reachable right now": retry within the budget.
_TRANSIENT = {
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.NETWORK_EXCEPTION, KafkaError._RESOLVE, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._WAIT_COORD,
    KafkaError.BROKER_NOT_AVAILABLE, KafkaError._NODE_UPDATE, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH, KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError._NOENT,  # admin ListOffsets: "Failed to query partition leaders: No leaders found"
}
_UNKNOWN_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
_OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
#: A newer producer with the same transactional.id exists (or the coordinator aborted a timed-out transaction and
#: bumped the epoch): this producer can never write again.
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
           KafkaError.TRANSACTION_COORDINATOR_FENCED}
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_MSG_SIZE}


#: librdkafka's words for a client whose security.protocol does not match the listener it reached.
_SECURE_CLIENT_AT_PLAIN_LISTENER = (
    "connecting to a PLAINTEXT broker listener?",  # SSL/SASL_SSL: the TLS handshake meets a plaintext listener
    "Request not valid in current SASL state",  # SASL_PLAINTEXT: a listener without SASL refuses the handshake
)
_PLAIN_CLIENT_AT_SECURE_LISTENER = ("connecting to a SSL listener?", "Disconnected while requesting ApiVersion")


class ClientErrors:
    """An ``error_cb`` keeping librdkafka's last few distinct error texts: a request that times out reports only
    ``_TRANSPORT``, while the reason (a TLS or SASL handshake the listener refused) comes through this callback."""

    def __init__(self, keep: int = 8) -> None:
        self.texts: deque[str] = deque(maxlen=keep)

    def __call__(self, err: KafkaError) -> None:
        text = err.str()
        if text not in self.texts:
            self.texts.append(text)


def listener_hint(security_protocol: Optional[str], brokers: str, texts: Iterable[str] = ()) -> str:
    """A sentence for a broker outage that may be a client/listener protocol mismatch ("" when nothing suggests
    one): said outright when librdkafka's error ``texts`` show it, as a possibility when the client does not use
    librdkafka's default PLAINTEXT."""
    protocol = (security_protocol or "PLAINTEXT").upper()
    texts = list(texts)
    evidence = next((t for t in texts if any(m in t for m in _SECURE_CLIENT_AT_PLAIN_LISTENER)), None)
    if evidence is not None and protocol != "PLAINTEXT":
        return (f". The listener at {brokers} refused kafka.security.protocol={protocol} and looks like a PLAINTEXT "
                f"listener (librdkafka: {evidence}); set kafka.security.protocol to the protocol of the listener "
                f"on that port, or point kafka.bootstrap.servers at the brokers' {protocol} listener")
    evidence = next((t for t in texts if any(m in t for m in _PLAIN_CLIENT_AT_SECURE_LISTENER)), None)
    if evidence is not None and protocol == "PLAINTEXT":
        return (f". The listener at {brokers} closed PLAINTEXT connections during the first request, as an SSL or "
                f"SASL listener does (librdkafka: {evidence}); set kafka.security.protocol (SSL, SASL_SSL or "
                f"SASL_PLAINTEXT) to the listener's protocol")
    if protocol != "PLAINTEXT":
        return (f". kafka.security.protocol={protocol} may not match the listener at {brokers}: a listener of "
                f"another protocol (such as PLAINTEXT) only shows as unreachable brokers. Check the brokers' "
                f"listeners/advertised.listeners for that port")
    return ""


def kafka_error_of(exc: BaseException | KafkaError | None) -> Optional[KafkaError]:
    """The :class:`KafkaError` carried by ``exc`` (a KafkaException, a KafkaError, or None)."""
    if exc is None:
        return None
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def is_transient(exc: BaseException | KafkaError | None) -> bool:
    """True if the error is a broker outage / leader move / timeout that a retry can cure."""
    err = kafka_error_of(exc)
    if err is None:
        return False
    return err.code() in _TRANSIENT or (err.retriable() and err.code() not in _UNKNOWN_TOPIC)


def is_retriable_fetch_error(err: Optional[KafkaError]) -> bool:
    """An error event from ``Consumer.consume`` that librdkafka recovers from by itself (it keeps fetching): any
    transient error and any other local (negative-code) error except unknown topic/partition."""
    if err is None:
        return False
    return is_transient(err) or (err.code() < 0 and err.code() not in _UNKNOWN_TOPIC)


def no_progress_error() -> KafkaException:
    """What a fetch reports when neither records nor end-of-partition arrived within the budget."""
    return KafkaException(KafkaError(KafkaError._TIMED_OUT, "no records or end-of-partition arrived"))


def is_unknown_topic(exc: BaseException | KafkaError | None) -> bool:
    err = kafka_error_of(exc)
    return err is not None and err.code() in _UNKNOWN_TOPIC


def is_partition_eof(err: Optional[KafkaError]) -> bool:
    return err is not None and err.code() == KafkaError._PARTITION_EOF


def is_out_of_range(exc: BaseException | KafkaError | None) -> bool:
    err = kafka_error_of(exc)
    return err is not None and err.code() in _OUT_OF_RANGE


def is_purged(err: Optional[KafkaError]) -> bool:
    """A delivery report for a record dropped by our own ``purge``/``abort_transaction``, not a delivery failure."""
    return err is not None and err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)


def is_group_not_found(exc: BaseException | KafkaError | None) -> bool:
    """Deleting a consumer group that does not exist (any more): nothing left to delete."""
    err = kafka_error_of(exc)
    return err is not None and err.code() == KafkaError.GROUP_ID_NOT_FOUND


def is_group_in_use(exc: BaseException | KafkaError | None) -> bool:
    """Deleting a consumer group that still has members: a client uses it."""
    err = kafka_error_of(exc)
    return err is not None and err.code() == KafkaError.NON_EMPTY_GROUP


def is_fenced(exc: BaseException | KafkaError | None) -> bool:
    err = kafka_error_of(exc)
    return err is not None and err.code() in _FENCED


def is_generic_fatal(exc: BaseException | KafkaError | None) -> bool:
    """librdkafka's ``_FATAL``: the client failed fatally before this call; the cause comes with a later call."""
    err = kafka_error_of(exc)
    return err is not None and err.code() == KafkaError._FATAL


def is_retriable_txn_error(exc: BaseException | KafkaError | None) -> bool:
    """A transactional call (init/commit/send offsets) that may simply be repeated: librdkafka marks it retriable
    (coordinator moving, timeout) and the transaction itself is still intact."""
    err = kafka_error_of(exc)
    return err is not None and not err.fatal() and not err.txn_requires_abort() and (
        err.retriable() or err.code() in _TRANSIENT)


def translate(exc: BaseException | KafkaError, *, brokers: str, topic: str, action: str,
              elapsed_s: Optional[float] = None, budget_ms: Optional[int] = None,
              security_protocol: Optional[str] = None, client_errors: Iterable[str] = ()) -> KafkaConnectorError:
    """Turn a librdkafka error that happened while doing ``action`` on ``topic`` into our exception.

    ``elapsed_s``/``budget_ms`` are given when the retry budget ran out; the message then names the option to raise.
    ``security_protocol`` (option kafka.security.protocol) and ``client_errors`` (texts a :class:`ClientErrors`
    kept) let a broker outage say when the protocol may not match the listener.
    """
    err = kafka_error_of(exc)
    name = err.name() if err is not None else type(exc).__name__
    detail = err.str() if err is not None else str(exc)
    hint = listener_hint(security_protocol, brokers, [detail, *client_errors])
    if err is not None and err.code() in _FENCED:
        return ProducerFencedError(
            f"the transactional producer writing {topic} was fenced while {action} ({name}: {detail}): a newer "
            f"producer with the same transactional.id started. Expected for a superseded attempt of a Spark task (a "
            f"retry or speculative copy took over). Otherwise another query uses the same transactionalIdPrefix "
            f"(give every query its own), or the transaction outlived kafka.transaction.timeout.ms and the broker "
            f"aborted it (raise that option)")
    if err is not None and err.code() in _TOO_LARGE:
        return RecordTooLargeError(
            f"a record for {topic} is too large while {action} on brokers {brokers} ({name}: {detail}); raise "
            f"option kafka.message.max.bytes (producer) and the topic's max.message.bytes (broker), or write "
            f"smaller values")
    if err is not None and err.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        return TransactionTimeoutError(
            f"brokers {brokers} rejected the sink's transaction timeout while {action} ({name}: {detail}); "
            f"kafka.transaction.timeout.ms must not exceed the brokers' transaction.max.timeout.ms (15 minutes "
            f"by default)")
    if err is not None and err.code() == KafkaError._MSG_TIMED_OUT:
        return BrokersUnavailableError(
            f"records for {topic} could not be delivered to Kafka brokers {brokers} while {action} ({name}: "
            f"{detail}); librdkafka retried for message.timeout.ms (the sink sets it from brokerRetryTimeoutMs, "
            f"capped by kafka.transaction.timeout.ms). Check that the brokers are reachable, or raise the option"
            + hint)
    if err is None or is_transient(err):
        if budget_ms is not None:
            return BrokersUnavailableError(
                f"Kafka brokers {brokers} did not answer while {action} for {topic}: still failing after "
                f"{elapsed_s or 0:.1f} s ({name}: {detail}). The retry budget brokerRetryTimeoutMs={budget_ms} "
                f"was used up; check that the brokers are reachable, or raise option brokerRetryTimeoutMs to ride "
                f"out longer outages" + hint)
        return BrokersUnavailableError(f"Kafka brokers {brokers} unavailable while {action} for {topic} "
                                       f"({name}: {detail})" + hint)
    if err.code() in _UNKNOWN_TOPIC:
        return UnknownTopicError(
            f"{topic} does not exist on Kafka brokers {brokers} ({name}) while {action}; create it, fix option "
            + ("topic/progressTopic or the topic column" if action.startswith("writing") else
               "subscribe/subscribePattern/assign, or set failOnDataLoss=false to skip deleted topics"))
    if err.code() in _OUT_OF_RANGE:
        return OffsetOutOfRangeError(
            f"offset out of range while {action} for {topic} on brokers {brokers} ({name}: {detail}); the data "
            f"was deleted by retention or the offset is past the end. Fix option startingOffsets, or set "
            f"failOnDataLoss=false to skip to the earliest available offset")
    if err.code() == KafkaError._PARTITION_EOF:
        return KafkaDataLossError(f"{topic}: unexpected end of partition while {action} on brokers {brokers}")
    return KafkaRequestError(f"Kafka request failed while {action} for {topic} on brokers {brokers} "
                             f"({name}: {detail})")


def rejected_configuration(client: str, exc: KafkaException, config: Mapping[str, object]) -> KafkaConfigurationError:
    """librdkafka's refusal to create ``client`` from ``config``, with every secret's value redacted: librdkafka
    quotes a value it cannot parse. Raise it ``from None``: the original's text is unredacted."""
    error = kafka_error_of(exc)
    reason = redact_text(error.str() if error is not None else str(exc), secret_values(config))
    return KafkaConfigurationError(
        f"librdkafka rejected the {client} configuration: {reason}; fix or remove the kafka.* option it names")
