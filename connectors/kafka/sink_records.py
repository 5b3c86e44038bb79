"""Turning the sink's input rows (Arrow record batches) into librdkafka ``produce`` calls.

Input columns are those of Spark's Kafka sink: ``value`` (required; binary or string, null = tombstone), ``key``
(binary or string), ``topic`` (string; null falls back to option ``topic``), ``partition`` (int; null = chosen by
the partitioner) and ``headers`` (``array<struct<key: string, value: binary>>``). Other columns are ignored.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat, starmap
from operator import length_hint
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from connectors.kafka.errors import KafkaConfigurationError

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Producer

    from connectors.kafka.bulk_producer import BulkProducer

__all__ = ["validate_input_schema", "produce_batches", "produce_column_batches"]

_HEADERS = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))

#: How many records between two ``poll(0)`` calls that serve delivery reports (Spark hands the sink Arrow batches
#: of ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, 10,000 by default).
POLL_EVERY = 10_000

#: How long to serve events before trying again when librdkafka's local queue is full. Delivered records make
#: room without an event to wake ``poll`` (only failures are reported), so ``poll`` sleeps the whole time: a short
#: step keeps a producer that outruns its broker connection from waiting long after room was made.
ROOM_WAIT_S = 0.002

#: Runs an iterator to its end, keeping nothing (the ``consume`` recipe of :mod:`itertools`).
_exhaust: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def validate_input_schema(schema: StructType, default_topic: Optional[str]) -> None:
    """Check the input columns when the query starts, with Spark's Kafka sink's rules and our error class."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise KafkaConfigurationError(
            f"the keyedstate-kafka sink needs a column named 'value' (binary or string); the input has "
            f"{', '.join(schema.fieldNames()) or 'no columns'}")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (BinaryType, StringType)):
            raise KafkaConfigurationError(
                f"sink column {name!r} must be binary or string, not {types[name].simpleString()}")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise KafkaConfigurationError(f"sink column 'topic' must be a string, not {types['topic'].simpleString()}")
    if "topic" not in types and default_topic is None:
        raise KafkaConfigurationError("the keyedstate-kafka sink needs option topic or a column named 'topic'")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise KafkaConfigurationError(
            f"sink column 'partition' must be an int, not {types['partition'].simpleString()}")
    if "headers" in types and types["headers"] != _HEADERS and not (
            isinstance(types["headers"], ArrayType)
            and types["headers"].elementType.simpleString() == _HEADERS.elementType.simpleString()):
        raise KafkaConfigurationError(
            f"sink column 'headers' must be {_HEADERS.simpleString()}, not {types['headers'].simpleString()}")


def _binary(batch: "pa.RecordBatch", name: str) -> Optional[list]:
    import pyarrow as pa

    idx = _index_of(batch.schema, name)
    if idx is None:
        return None
    col = batch.column(idx)
    if pa.types.is_string(col.type):
        col = col.cast(pa.binary())
    elif pa.types.is_large_string(col.type):
        col = col.cast(pa.large_binary())
    return col.to_pylist()


def _column(batch: "pa.RecordBatch", name: str) -> Optional[list]:
    idx = _index_of(batch.schema, name)
    return None if idx is None else batch.column(idx).to_pylist()


def produce_batches(producer: Producer, batches: Iterator["pa.RecordBatch"], default_topic: Optional[str],
                    check_topic: Callable[[str], None]) -> int:
    """Produce every row of ``batches``; return how many. ``check_topic(t)`` runs once per distinct topic before
    the first record for it (librdkafka would otherwise wait ``topic.metadata.propagation.max.ms`` to report an
    unknown topic). Delivery reports go to the producer's configured ``on_delivery`` (failures only)."""
    checked: set[str] = set()
    if default_topic is not None:
        check_topic(default_topic)
        checked.add(default_topic)
    count = 0
    for batch in batches:
        n = batch.num_rows
        # Slices of POLL_EVERY rows (zero-copy), each followed by one poll(0) that serves its delivery reports:
        # no per-record counter in the loops below.
        for start in range(0, n, POLL_EVERY):
            part = batch if n <= POLL_EVERY else batch.slice(start, POLL_EVERY)
            count += _produce_part(producer, part, default_topic, checked, check_topic)
            producer.poll(0)
    return count


def produce_column_batches(producer: "BulkProducer", batches: Iterator["pa.RecordBatch"], topic: str,
                           check_topic: Callable[[str], None]) -> int:
    """:func:`produce_batches`' twin for input that :func:`~connectors.kafka.bulk_producer.takes_columns` accepts:
    each slice of POLL_EVERY rows goes to librdkafka in one call (see :mod:`connectors.kafka.bulk_producer`)."""
    check_topic(topic)
    count = 0
    for batch in batches:
        value_index = _index_of(batch.schema, "value")
        key_index = _index_of(batch.schema, "key")
        for start in range(0, batch.num_rows, POLL_EVERY):
            part = batch.slice(start, POLL_EVERY)
            producer.produce_columns(topic, part.column(value_index),
                                     part.column(key_index) if key_index is not None else None)
            count += part.num_rows
            producer.poll(0)
    return count


def _index_of(schema: "pa.Schema", name: str) -> Optional[int]:
    """The column ``name`` matched without regard to case, as Spark resolves the sink's columns."""
    return next((i for i, field in enumerate(schema) if field.name.lower() == name), None)


def _produce_part(producer: Producer, batch: "pa.RecordBatch", default_topic: Optional[str], checked: set[str],
                  check_topic: Callable[[str], None]) -> int:
    produce = producer.produce
    n = batch.num_rows
    values = _binary(batch, "value")
    assert values is not None  # validate_input_schema requires the column
    keys = _binary(batch, "key") or [None] * n
    topics = _column(batch, "topic")
    partitions = _column(batch, "partition")
    headers = _column(batch, "headers")
    if topics is None and partitions is None and headers is None:
        # The common case. starmap hands produce() zip's (topic, value, key) tuple as its argument tuple: no bytecode
        # loop and no argument tuple built per record, ~10% of what a record costs the Python thread.
        value_it, key_it = iter(values), iter(keys)
        while True:
            try:
                _exhaust(starmap(produce, zip(repeat(default_topic), value_it, key_it)))
                return n
            except BufferError:
                # zip took the refused record from both iterators: it is the last one consumed. The next round
                # continues after it.
                i = n - length_hint(value_it) - 1
                _wait_for_space(producer, (default_topic, values[i], keys[i]), {})
    for i in range(n):
        topic = (topics[i] if topics is not None else None) or default_topic
        if topic is None:
            raise KafkaConfigurationError(
                "a row has a null 'topic' and the sink has no option topic to fall back to; set option topic")
        if topic not in checked:
            check_topic(topic)
            checked.add(topic)
        kwargs: dict = {}
        if partitions is not None and partitions[i] is not None:
            kwargs["partition"] = partitions[i]
        if headers is not None and headers[i]:
            kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
        value, key = values[i], keys[i]
        try:
            produce(topic, value, key, **kwargs)
        except BufferError:
            _wait_for_space(producer, (topic, value, key), kwargs)
    return n


def _wait_for_space(producer: Producer, args: tuple, kwargs: dict) -> None:
    """librdkafka's local queue is full: serve delivery reports until the record fits. (Arguments rather than a
    closure: a closure over the loop variables would make every access to them in the loops above slower.)"""
    while True:
        producer.poll(ROOM_WAIT_S)
        try:
            producer.produce(*args, **kwargs)
            return
        except BufferError:
            continue
