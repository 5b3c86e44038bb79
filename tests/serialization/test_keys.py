"""Key encoding: deterministic across processes, order-preserving within a type, self-delimiting."""

from __future__ import annotations

import datetime as dt
import random
import subprocess
import sys

import numpy as np
import pytest

from keyedstate.errors import UnsupportedKeyTypeError
from keyedstate.serialization import decode_key, encode_key, encode_keys_with_prefix

SAMPLE_KEYS = [
    None, True, False, 0, 1, -1, 2**63 - 1, -(2**63), 2**64, -(2**80), 0.0, -2.5, 1e300, "", "a", "a\x00b", "héllo",
    b"", b"\x00\xff", (), ("a", 1), (None, (1, None), b"x"), dt.date(2024, 2, 29),
    dt.datetime(2024, 1, 1, 12, 30), dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
]


@pytest.mark.parametrize("key", SAMPLE_KEYS, ids=repr)
def test_every_supported_key_round_trips(key):
    encoded = encode_key(key)
    decoded, end = decode_key(encoded)
    assert decoded == key and type(decoded) is type(key)
    assert end == len(encoded)


def test_equal_keys_encode_to_equal_bytes_in_another_process():
    script = "from keyedstate.serialization import encode_key; print(encode_key(('user-7', 42, 3.5)).hex())"
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert bytes.fromhex(other) == encode_key(("user-7", 42, 3.5))


@pytest.mark.parametrize(
    "values",
    [
        [random.Random(1).randint(-(2**70), 2**70) for _ in range(300)] + [0, -1, 1, 2**63, -(2**63) - 1],
        ["", "a", "aa", "ab", "b", "a\x00", "a\x00b", "z" * 5, "é", "\U0001f600"],
        [random.Random(2).uniform(-1e9, 1e9) for _ in range(200)] + [0.0, -0.0001, 1e-300, float("inf"), float("-inf")],
        [("a", 1), ("a", 2), ("a", 10), ("b", 0), ("a",), ("a", 1, "x")],
    ],
    ids=["ints", "strings", "floats", "tuples"],
)
def test_byte_order_equals_value_order_within_a_type(values):
    assert sorted(values, key=encode_key) == sorted(values)


def test_a_key_followed_by_a_namespace_is_never_a_prefix_of_another_key_and_anything():
    keys = ["a", "ab", "a\x00", ("a",), ("a", "b"), b"a", b"a\x00", b"a\x00\x00", 1, 256, (None,), (None, None), ""]
    namespace = encode_key(None)
    for left in keys:
        scan_prefix = encode_key(left) + namespace
        for right in keys:
            if right is not left:
                for suffix in (namespace, encode_key("ns"), encode_key(("x", 1))):
                    assert not (encode_key(right) + suffix).startswith(scan_prefix), (left, right, suffix)


def test_values_that_compare_equal_across_types_stay_distinct():
    assert len({encode_key(1), encode_key(1.0), encode_key(True)}) == 3
    assert encode_key(0.0) == encode_key(-0.0)


def test_numpy_scalars_encode_like_python_scalars():
    assert encode_key(np.int64(5)) == encode_key(5)
    assert encode_key(np.float64(2.5)) == encode_key(2.5)
    assert encode_key((np.int32(1), np.str_("a"))) == encode_key((1, "a"))


@pytest.mark.parametrize("bad", [[1], {"a": 1}, {1}, object(), float("nan"), (1, [2])])
def test_unsupported_keys_fail_with_the_type_and_the_fix(bad):
    with pytest.raises(UnsupportedKeyTypeError, match="key"):
        encode_key(bad)


def test_encoding_a_batch_of_keys_with_a_prefix_equals_encoding_each_key():
    keys = ["a", "", "nul\x00inside", "ünïcode", 7, ("t", 1), None, b"raw", "a"]
    assert encode_keys_with_prefix(b"\x00\x05", keys) == [b"\x00\x05" + encode_key(key) for key in keys]
    assert encode_keys_with_prefix(b"", []) == []
    with pytest.raises(UnsupportedKeyTypeError):
        encode_keys_with_prefix(b"\x00\x00", ["fine", object()])
