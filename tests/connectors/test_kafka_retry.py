"""Retry budget and librdkafka error translation (no broker: fake clock and synthetic KafkaErrors)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from connectors.kafka import (
    BrokersUnavailableError,
    KafkaRequestError,
    OffsetOutOfRangeError,
    UnknownTopicError,
    error_codes,
)
from connectors.kafka.retry import RetryBudget, call_with_retry


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def budget(ms: int, clock: Clock) -> RetryBudget:
    return RetryBudget(ms, 500, "b1:9092,b2:9092", clock=clock, sleep=clock.sleep)


def down() -> KafkaException:
    return KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "all down"))


def test_outage_shorter_than_budget_is_ridden_out():
    clock = Clock()
    calls = []

    def fn():
        calls.append(clock.now)
        if clock.now < 20:  # brokers back after 20 s
            raise down()
        return "ok"

    assert call_with_retry(fn, budget(30_000, clock), topic="topic 't'", action="listing offsets") == "ok"
    assert len(calls) > 10 and clock.now >= 20


def test_outage_longer_than_budget_fails_naming_brokers_topic_and_option():
    clock = Clock()

    def fn():
        raise down()

    with pytest.raises(BrokersUnavailableError) as e:
        call_with_retry(fn, budget(5_000, clock), topic="topic 'events'", action="listing latest offsets")
    msg = str(e.value)
    assert "b1:9092,b2:9092" in msg and "'events'" in msg and "brokerRetryTimeoutMs=5000" in msg
    assert 5.0 <= clock.now <= 5.6


def test_budget_restarts_after_a_success():
    clock = Clock()
    b = budget(3_000, clock)
    for _ in range(3):  # three separate 2 s outages never exhaust a 3 s budget
        state = {"fails": 4}

        def fn(state=state):
            if state["fails"]:
                state["fails"] -= 1
                raise down()
            return 1

        assert call_with_retry(fn, b, topic="t", action="x") == 1


def test_non_transient_errors_are_translated_at_once():
    clock = Clock()
    for code, exc_type in ((KafkaError.UNKNOWN_TOPIC_OR_PART, UnknownTopicError),
                           (KafkaError.OFFSET_OUT_OF_RANGE, OffsetOutOfRangeError),
                           (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaRequestError)):
        def fn(code=code):
            raise KafkaException(KafkaError(code))

        with pytest.raises(exc_type):
            call_with_retry(fn, budget(60_000, clock), topic="topic 't'", action="x")
    assert clock.now == 0  # no retries, no sleeping


def test_classification():
    assert error_codes.is_transient(KafkaError(KafkaError.NOT_COORDINATOR))
    assert error_codes.is_transient(KafkaError(KafkaError._TRANSPORT))
    assert not error_codes.is_transient(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert error_codes.is_retriable_fetch_error(KafkaError(KafkaError._MAX_POLL_EXCEEDED))
    assert not error_codes.is_retriable_fetch_error(KafkaError(KafkaError._UNKNOWN_PARTITION))
    assert error_codes.is_out_of_range(KafkaError(KafkaError._AUTO_OFFSET_RESET))
    assert error_codes.kafka_error_of(ValueError("x")) is None
    with pytest.raises(ValueError):
        call_with_retry(lambda: (_ for _ in ()).throw(ValueError("not kafka")), budget(1000, Clock()),
                        topic="t", action="x")
