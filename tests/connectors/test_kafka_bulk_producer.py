"""The sink's bulk path (connectors/kafka/bulk_producer.py) is a twin of the Python path: the same input written
both ways, at least once or exactly once, gives the same records in the same partitions in the same order, and the
same errors. Real broker, no Spark."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pytest

from connectors.kafka import sink_producers, sink_writer
from connectors.kafka.bulk_producer import BulkProducer, bulk_path_available, takes_columns
from connectors.kafka.errors import KafkaConfigurationError, RecordTooLargeError, UnknownTopicError
from connectors.kafka.sink_options import parse_sink_options
from connectors.kafka.sink_writer import SinkTask, write_task
from kafka_helpers import create_topic, read_committed, unique

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("empty_producer_pool")]

#: With KEYEDSTATE_PURE_PYTHON=1 the bulk path is off by design and only the Python path is tested.
PATHS = ["bulk", "python"] if bulk_path_available() else ["python"]


@pytest.fixture
def use_path(monkeypatch):
    """Choose the path the next write_task takes; every producer created meanwhile must be of that path's kind."""
    chosen: list[str] = []
    created: list[tuple[str, type]] = []
    real_create = sink_producers.create_producer

    def recording_create(*args, **kwargs):
        producer = real_create(*args, **kwargs)
        created.append((chosen[-1], type(producer)))
        return producer

    def use(path: str) -> None:
        monkeypatch.setattr(sink_writer, "bulk_path_available", lambda: path == "bulk")
        chosen.append(path)

    monkeypatch.setattr(sink_producers, "create_producer", recording_create)
    monkeypatch.setattr(sink_writer, "create_producer", recording_create)
    yield use
    for path, kind in created:
        assert kind is (BulkProducer if path == "bulk" else sink_producers.Producer), (path, kind)


def _options(bootstrap: str, topic: str, guarantee: str = "at_least_once", **extra: str):
    exactly_once = {"transactionalIdPrefix": unique("bulk")} if guarantee == "exactly_once" else {}
    return parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic, "deliveryGuarantee": guarantee,
                               "brokerRetryTimeoutMs": "10000", **exactly_once, **extra})


def _written(bootstrap: str, topic: str) -> tuple[dict[int, list[tuple]], list[tuple], dict[int, list]]:
    """What reached ``topic``: the keyed records of each partition in offset order; the records without a key in
    any order (the partitioner places them at random); and each partition's values in offset order."""
    keyed: dict[int, list[tuple]] = defaultdict(list)
    unkeyed: list[tuple] = []
    values: dict[int, list] = defaultdict(list)
    for partition, key, value, _ in read_committed(bootstrap, topic):
        if key is None:
            unkeyed.append((key, value))
        else:
            keyed[partition].append((key, value))
        values[partition].append(value)
    return dict(keyed), sorted(unkeyed, key=repr), dict(values)


def _input_order(value: bytes | None) -> int:
    return int(value.split(b"-")[1]) if value else -1


def _strings(n: int) -> pa.RecordBatch:
    keys = [None if i % 17 == 0 else ("" if i % 23 == 0 else f"key-{i % 101}") for i in range(n)]
    values = [None if i % 13 == 0 else ("" if i % 11 == 0 else f"value-{i}-" + "x" * (i % 50)) for i in range(n)]
    return pa.record_batch({"key": pa.array(keys, pa.string()), "value": pa.array(values, pa.string())})


def _inputs() -> dict[str, list[pa.RecordBatch]]:
    n = 3000
    strings = _strings(n)
    keys, values = strings.column(0).to_pylist(), strings.column(1).to_pylist()
    binary = pa.record_batch({"value": pa.array([v.encode() if v is not None else None for v in values], pa.binary()),
                              "key": pa.array([k.encode() if k is not None else None for k in keys], pa.binary()),
                              "ignored": pa.array(range(n), pa.int64())})
    large = pa.record_batch({"key": pa.array(keys, pa.large_string()), "value": pa.array(values, pa.large_binary())})
    return {
        "string columns with nulls and empty values": [strings],
        "binary columns, value first, another column": [binary],
        "large_string and large_binary": [large],
        "slices with an offset": [strings.slice(5, 1000), strings.slice(1500, 1499)],
        "no key column": [strings.select(["value"])],
        "every key null, every value empty": [pa.record_batch({"key": pa.array([None] * 50, pa.string()),
                                                               "value": pa.array([""] * 50, pa.string())})],
        "more rows than one produce call takes": [_strings(25_000)],
        "capitalised column names": [strings.rename_columns(["Key", "VALUE"])],
    }


@pytest.mark.skipif(not bulk_path_available(), reason="KEYEDSTATE_PURE_PYTHON=1 turns the bulk path off")
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("name", list(_inputs()))
def test_the_bulk_path_writes_the_same_records_to_the_same_partitions_in_the_same_order(kafka_broker, use_path,
                                                                                       name, guarantee):
    bs = kafka_broker.bootstrap
    batches = _inputs()[name]
    assert takes_columns(batches[0].schema)
    written = {}
    for path in PATHS:
        topic = create_topic(bs, 3)
        use_path(path)
        assert write_task(_options(bs, topic, guarantee), iter(batches), SinkTask("q", 0, 0)).records == sum(
            b.num_rows for b in batches)
        written[path] = _written(bs, topic)
    (keyed, unkeyed, values), (python_keyed, python_unkeyed, _) = written["bulk"], written["python"]
    assert keyed == python_keyed and unkeyed == python_unkeyed
    assert sum(map(len, keyed.values())) + len(unkeyed) == sum(b.num_rows for b in batches)
    for in_partition in values.values():  # input order within each partition, the unkeyed records included
        order = [_input_order(v) for v in in_partition if v]
        assert order == sorted(order)
    if "key" in {n.lower() for n in batches[0].schema.names} and name != "every key null, every value empty":
        assert len(keyed) == 3, "keys spread over every partition"


def test_only_plain_value_and_key_columns_take_the_bulk_path():
    plain = pa.schema([("key", pa.binary()), ("value", pa.string()), ("other", pa.int64())])
    assert takes_columns(plain)
    assert not takes_columns(pa.schema([("key", pa.binary())]))
    for extra in ("topic", "partition", "headers"):
        assert not takes_columns(plain.append(pa.field(extra, pa.string())))
    assert not takes_columns(pa.schema([("value", pa.dictionary(pa.int32(), pa.string()))]))


#: name -> (input values, extra options, whether the topic exists, the error and what its message names)
FAILURES = {
    "a record above the producer's size limit": (["small", "x" * 5000, "after"], {"kafka.message.max.bytes": "2000"},
                                                 True, RecordTooLargeError, "kafka.message.max.bytes"),
    "an unknown topic": (["v"], {"brokerRetryTimeoutMs": "2000"}, False, UnknownTopicError,
                         "topic '{topic}' does not exist"),
    "a producer property librdkafka rejects": (["v"], {"kafka.no.such.property": "1"}, True,
                                               KafkaConfigurationError, "no.such.property"),
}


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("failure", list(FAILURES))
def test_both_paths_fail_with_the_same_error_naming_the_cause(kafka_broker, use_path, failure, path, guarantee):
    values, extra, topic_exists, error, names = FAILURES[failure]
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1) if topic_exists else unique("missing")
    if guarantee == "exactly_once" and not topic_exists:
        extra = {**extra, "progressTopic": create_topic(bs, 1)}
    use_path(path)
    with pytest.raises(error, match=names.format(topic=topic)):
        write_task(_options(bs, topic, guarantee, **extra), iter([pa.record_batch({"value": pa.array(values)})]),
                   SinkTask("q", 0, 0))
    assert sink_producers.pooled_count() == 0, "a producer that failed is not kept"
    if topic_exists and guarantee == "exactly_once":
        assert read_committed(bs, topic) == [], "the transaction was aborted"


def test_keyedstate_pure_python_turns_the_bulk_path_off(monkeypatch):
    from connectors.kafka import librdkafka
    from keyedstate.fastpath import PURE_PYTHON_VARIABLE

    monkeypatch.setenv(PURE_PYTHON_VARIABLE, "1")
    assert librdkafka._load() is None
    monkeypatch.setattr(librdkafka, "LIBRARY", None)
    assert not bulk_path_available()
    with pytest.raises(RuntimeError, match="Python path"):
        BulkProducer({}, lambda err, topic: None, sink_producers.log)
