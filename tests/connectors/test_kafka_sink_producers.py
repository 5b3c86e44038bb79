"""At-least-once producers kept in the Python worker between write tasks (connectors/kafka/sink_producers.py),
against a real broker, without Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from connectors.kafka import sink_producers
from connectors.kafka.errors import RecordTooLargeError
from connectors.kafka.sink_options import parse_sink_options
from connectors.kafka.sink_writer import SinkTask, write_task
from kafka_helpers import create_topic, read_committed, unique, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("empty_producer_pool")]


def _rows(values: list[str]) -> list[pa.RecordBatch]:
    return [pa.record_batch({"key": pa.array([v.encode() for v in values], pa.binary()),
                             "value": pa.array(values, pa.string())})]


def _at_least_once(bootstrap: str, topic: str, **extra: str):
    return parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                               "deliveryGuarantee": "at_least_once", "brokerRetryTimeoutMs": "10000", **extra})


def _pooled() -> list:
    return [entry.producer for entry in sink_producers._pool.values()]


def _values(bootstrap: str, topic: str) -> list[str]:
    return sorted(v.decode() for _, _, v, _ in read_committed(bootstrap, topic))


def test_consecutive_at_least_once_tasks_share_one_producer_per_set_of_options(kafka_broker):
    bs = kafka_broker.bootstrap
    topic, other_topic = create_topic(bs, 2), create_topic(bs, 1)
    assert write_task(_at_least_once(bs, topic), iter(_rows(["a", "b"])), SinkTask("q", 0, 0)).records == 2
    (first,) = _pooled()
    # the topic is not part of the producer's configuration: another topic's task takes the same producer
    assert write_task(_at_least_once(bs, other_topic), iter(_rows(["c"])), SinkTask("q", 0, 1)).records == 1
    assert _pooled() == [first]
    write_task(_at_least_once(bs, topic, **{"kafka.linger.ms": "1"}), iter(_rows(["d"])), SinkTask("q", 1, 0))
    assert len(_pooled()) == 2 and first in _pooled()
    assert _values(bs, topic) == ["a", "b", "d"] and _values(bs, other_topic) == ["c"]


def test_a_failed_task_closes_its_producer_and_the_next_task_starts_without_its_failure(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1, config={"max.message.bytes": "2000"})
    opts = _at_least_once(bs, topic)
    write_task(opts, iter(_rows(["before"])), SinkTask("q", 0, 0))
    (used,) = _pooled()
    with pytest.raises(RecordTooLargeError):
        write_task(opts, iter(_rows(["x" * 5000])), SinkTask("q", 1, 0))
    assert _pooled() == [], "a producer that saw a delivery failure must not serve the next task"
    assert write_task(opts, iter(_rows(["after"])), SinkTask("q", 1, 0, attempt=1)).records == 1
    (fresh,) = _pooled()
    assert fresh is not used
    assert _values(bs, topic) == ["after", "before"]


def test_an_idle_producer_is_closed_after_the_idle_timeout(kafka_broker, monkeypatch):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    write_task(_at_least_once(bs, topic), iter(_rows(["a"])), SinkTask("q", 0, 0))
    (idle,) = _pooled()
    monkeypatch.setattr(sink_producers, "IDLE_TIMEOUT_S", 0.0)
    write_task(_at_least_once(bs, topic, **{"kafka.linger.ms": "1"}), iter(_rows(["b"])), SinkTask("q", 1, 0))
    assert idle not in _pooled() and len(_pooled()) == 1
    assert _values(bs, topic) == ["a", "b"]


def test_exactly_once_producers_are_never_pooled(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    opts = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": topic, "transactionalIdPrefix": unique("t")})
    assert write_task(opts, iter(_rows(["a"])), SinkTask("q", 0, 0)).records == 1
    assert _pooled() == []


def test_a_pooled_producer_skips_the_topic_check_for_a_topic_it_found_and_still_names_one_deleted_since(
        kafka_broker, monkeypatch):
    from confluent_kafka.admin import AdminClient

    from connectors.kafka import sink_writer
    from connectors.kafka.errors import UnknownTopicError

    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    checks: list[str] = []
    real_topic_error = sink_writer._topic_error
    monkeypatch.setattr(sink_writer, "_topic_error", lambda p, t, s: checks.append(t) or real_topic_error(p, t, s))
    opts = _at_least_once(bs, topic, brokerRetryTimeoutMs="5000")
    write_task(opts, iter(_rows(["a"])), SinkTask("q", 0, 0))
    write_task(opts, iter(_rows(["b"])), SinkTask("q", 1, 0))
    assert checks == [topic], "the second task trusts the first one's check"
    assert _values(bs, topic) == ["a", "b"]

    admin = AdminClient({"bootstrap.servers": bs})
    admin.delete_topics([topic])[topic].result(30)
    # the controller answers before the broker has applied the deletion; a write in between still lands
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 30, "topic deletion")
    with pytest.raises(UnknownTopicError, match=topic):
        write_task(opts, iter(_rows(["c"])), SinkTask("q", 2, 0))
    # the records timed out; the check that had been skipped then ran and named the cause
    assert checks == [topic, topic]
