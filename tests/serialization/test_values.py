"""The default value codec: versioned, exact round trips, pickle only as a fallback."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import pickle
import threading

import pytest

from keyedstate.errors import SerializationError
from keyedstate.serialization import DEFAULT_CODEC, PickleValueCodec


@dataclasses.dataclass
class Point:
    x: int
    y: int


VALUES = [
    None, True, 0, -(2**100), 1.5, "text", b"raw", [1, "a", None], (1, (2, 3)), {"a": {"b": [1]}},
    {(1, 2): "tuple-key"}, {1, 2}, frozenset({"x"}), dt.datetime(2024, 5, 1, 8, 0, 0, 123456),
    dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), dt.datetime(2024, 5, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    dt.date(2020, 1, 1), dt.timedelta(seconds=1.5), decimal.Decimal("12.3400"), Point(1, 2), [Point(3, 4)],
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_values_round_trip_with_their_types(value):
    decoded = DEFAULT_CODEC.deserialize(DEFAULT_CODEC.serialize(value))
    assert decoded == value and type(decoded) is type(value)


def test_common_values_are_not_pickled():
    for value in (1, 2.5, "a", [1, 2], {"a": (1, 2)}, dt.date(2020, 1, 1)):
        assert b"\x80" not in DEFAULT_CODEC.serialize(value)[:2]
        assert DEFAULT_CODEC.serialize(value)[:1] in (b"\x01", b"\x03", b"\x04")


@pytest.mark.parametrize("value", [0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 10**30, True, 0.0, -0.0,
                                   float("inf"), 1e-300], ids=repr)
def test_ints_and_floats_use_fixed_width_formats_within_64_bits(value):
    data = DEFAULT_CODEC.serialize(value)
    fixed = type(value) is float or (type(value) is int and -(2**63) <= value < 2**63)
    assert (len(data) == 9 and data[0] in (3, 4)) == fixed
    decoded = DEFAULT_CODEC.deserialize(data)
    assert decoded == value and type(decoded) is type(value)
    assert str(decoded) == str(value)  # keeps the sign of -0.0


def test_nan_round_trips():
    import math

    assert math.isnan(DEFAULT_CODEC.deserialize(DEFAULT_CODEC.serialize(float("nan"))))


def test_ints_written_as_msgpack_by_earlier_versions_still_read():
    import msgpack

    assert DEFAULT_CODEC.deserialize(b"\x01" + msgpack.packb(42)) == 42
    assert DEFAULT_CODEC.deserialize(b"\x01" + msgpack.packb(2.5)) == 2.5


def test_a_truncated_fixed_width_value_is_reported_not_misread():
    with pytest.raises(SerializationError, match="format byte"):
        DEFAULT_CODEC.deserialize(DEFAULT_CODEC.serialize(7)[:5])


def test_an_unpicklable_value_names_its_type_and_the_fix():
    with pytest.raises(SerializationError, match="lock.*picklable"):
        DEFAULT_CODEC.serialize({"handle": threading.Lock()})


def test_an_unknown_format_byte_is_reported_not_misread():
    with pytest.raises(SerializationError, match="format byte"):
        DEFAULT_CODEC.deserialize(b"\x09junk")


def test_the_pickle_codec_is_plain_pickle():
    assert PickleValueCodec().serialize(Point(1, 2)) == pickle.dumps(Point(1, 2), protocol=pickle.HIGHEST_PROTOCOL)


def test_the_default_codec_travels_by_pickle_with_what_holds_it():
    """Functions go to Spark's workers pickled; an OutputTag or descriptor they hold carries the default codec."""
    from keyedstate import OutputTag

    tag = pickle.loads(pickle.dumps(OutputTag("late")))
    assert tag == OutputTag("late")
    codec = tag.type_info.serializer
    assert codec.deserialize(codec.serialize({"a": [1, 2.5]})) == {"a": [1, 2.5]}
