"""Varints: the vectorised encoder writes exactly the bytes of the one-at-a-time encoder, so blobs written before
and after it are the same format."""

from __future__ import annotations

import random

import numpy as np
import pytest

from keyedstate.serialization import encode_key
from keyedstate.state.base.layout import KEY_GROUP_PREFIX_BYTES, VOID_NAMESPACE, key_group_prefix
from timers import BLOB_FORMAT_VERSION, decode_key_group_blob, encode_key_group_blob
from timers.varint import encode_varints, get_varint, put_varint

EDGES = [0, 1, 127, 128, 255, 16_383, 16_384, 2**32, 1_700_000_000_000, 2**63 - 1, 2**64 - 1]


def _one_by_one(values) -> bytes:
    out = bytearray()
    for value in values:
        put_varint(out, value)
    return bytes(out)


def test_edge_values_encode_like_the_scalar_encoder_and_decode_back():
    data = encode_varints(np.array(EDGES, dtype=np.uint64))
    assert data == _one_by_one(EDGES)
    position, decoded = 0, []
    while position < len(data):
        value, position = get_varint(data, position)
        decoded.append(value)
    assert decoded == EDGES


@pytest.mark.parametrize("seed", range(5))
def test_random_values_of_every_width_encode_like_the_scalar_encoder(seed):
    rng = random.Random(seed)
    values = [rng.getrandbits(rng.randrange(1, 65)) for _ in range(2_000)]
    assert encode_varints(np.array(values, dtype=np.uint64)) == _one_by_one(values)
    assert encode_varints(np.array(values, dtype=np.uint64).reshape(-1, 4)) == _one_by_one(values)  # row-major


def test_no_values_encode_to_no_bytes():
    assert encode_varints(np.array([], dtype=np.uint64)) == b""


def _reference_blob(key_group, event_timers, processing_timers) -> bytes:
    """The blob format of timers/codec.py's docstring, written one field at a time."""
    domains = [sorted(event_timers), sorted(processing_timers)]
    keys, namespaces = {}, {}
    for timers in domains:
        for timer in timers:
            keys.setdefault(timer[1], len(keys))
            namespaces.setdefault(timer[2], len(namespaces))
    out = bytearray((BLOB_FORMAT_VERSION,))
    put_varint(out, key_group)
    for table, strip in ((keys, KEY_GROUP_PREFIX_BYTES), (namespaces, 0)):
        put_varint(out, len(table))
        for item in table:
            put_varint(out, len(item[strip:]))
            out += item[strip:]
    for timers in domains:
        put_varint(out, len(timers))
        previous = 0
        for timestamp, prefix, namespace, _ in timers:
            put_varint(out, timestamp - previous)
            previous = timestamp
            put_varint(out, keys[prefix])
            put_varint(out, namespaces[namespace])
    return bytes(out)


@pytest.mark.parametrize("long_keys", [False, True], ids=["short-keys", "some-keys-over-127-bytes"])
@pytest.mark.parametrize("seed", range(4))
def test_key_group_blobs_are_byte_identical_to_the_documented_format(seed, long_keys):
    rng = random.Random(seed)
    key_group = rng.randrange(128)
    prefix = key_group_prefix(key_group)
    namespaces = [VOID_NAMESPACE, encode_key("window-1"), encode_key(("w", 2))]
    padding = ["", "x" * 120, "y" * 300] if long_keys else [""]  # a key table entry's length needs two varint bytes

    def timers(n):
        return [(rng.choice([rng.randrange(2**63), 1_700_000_000_000 + rng.randrange(10**6)]),
                 prefix + encode_key(f"key-{rng.randrange(n)}{rng.choice(padding)}"), rng.choice(namespaces),
                 key_group) for _ in range(n)]

    event_timers, processing_timers = list(set(timers(3_000))), list(set(timers(50)))
    blob = encode_key_group_blob(key_group, event_timers, processing_timers)
    assert blob == _reference_blob(key_group, event_timers, processing_timers)
    assert decode_key_group_blob(blob) == (key_group, sorted(event_timers), sorted(processing_timers))


@pytest.mark.parametrize("seed", range(3))
def test_many_varints_decode_at_once_to_the_encoded_values(seed):
    from timers.varint import decode_varints

    rng = random.Random(seed)
    values = [rng.getrandbits(rng.randrange(1, 65)) for _ in range(1_000)]
    data = b"\x05" + _one_by_one(values) + b"\x01"
    decoded, end = decode_varints(data, 1, len(values))
    assert decoded.tolist() == values and end == len(data) - 1
    with pytest.raises(IndexError):
        decode_varints(data[:-2], 1, len(values) + 1)


def test_a_blob_cut_anywhere_or_pointing_at_a_missing_key_is_rejected_as_corrupt():
    from keyedstate.errors import SerializationError

    prefix = key_group_prefix(3)
    timers = [(1_700_000_000_000 + i, prefix + encode_key(f"k{i % 4}"), VOID_NAMESPACE, 3) for i in range(10)]
    blob = encode_key_group_blob(3, timers, timers[:2])
    for cut in range(1, len(blob)):
        with pytest.raises(SerializationError):
            decode_key_group_blob(blob[:cut])
    last_key_index = len(blob) - 2  # the last timer's key index byte (its namespace index follows)
    with pytest.raises(SerializationError, match="corrupt"):
        decode_key_group_blob(blob[:last_key_index] + b"\x7f" + blob[last_key_index + 1:])
