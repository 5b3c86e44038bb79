"""The Python twin of Spark's xxhash64 gives every key the key group Spark's keyed_process gives it.

One Spark query hashes a DataFrame with a column of every supported type (edge cases first, then random rows with
nulls); the twin must reproduce every hash and key group bit for bit, from the same Python values, for the declared
types and for the types it infers from harness keys.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from decimal import Decimal
from typing import Any, Callable

import numpy as np
import pytest

from keyedstate.errors import ConfigurationError, NullKeyError, UnsupportedKeyTypeError
from keyedstate.key_types import KeyColumnType, infer_key_types, key_column_type, key_column_types
from keyedstate.keygroups import key_group_of_columns, key_group_of_key, spark_xxhash64

UTC = dt.timezone.utc
IST = dt.timezone(dt.timedelta(hours=5, minutes=30))
NAN, INF = math.nan, math.inf
NUM_KEY_GROUPS = (7, 128, 32768)
ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _strings() -> list[str]:
    ascii_every_length = [ASCII[:n] for n in range(0, 41)]  # every XXH64 tail: 32-byte stripes, 8, 4 and 1 bytes
    multi_byte = ["é", "日本語", "𝄞", "ü" * 17, "Ωmega-日本-😀-" * 3, "\x00", "a\x00b", "😀" * 300]
    return ascii_every_length + multi_byte


def _timestamps(tz: Any) -> list[dt.datetime]:
    return [
        dt.datetime(1970, 1, 1, tzinfo=tz), dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=tz),
        dt.datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=tz), dt.datetime(1900, 3, 1, 12, 0, 0, 1, tzinfo=tz),
        dt.datetime(1, 1, 1, tzinfo=tz), dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=tz),
        dt.datetime(2024, 2, 29, 8, 30, 15, 123_456, tzinfo=tz),
    ]


# column name, Spark type, edge-case values (row i takes value i modulo their number), random value
COLUMNS: list[tuple[str, str, list[Any], Callable[[random.Random], Any]]] = [
    ("b", "boolean", [True, False], lambda r: r.random() < 0.5),
    ("t", "tinyint", [0, 1, -1, 127, -128, 42], lambda r: r.randint(-128, 127)),
    ("s", "smallint", [0, 1, -1, 32767, -32768, 1000], lambda r: r.randint(-(2**15), 2**15 - 1)),
    ("i", "int", [0, 1, -1, 2**31 - 1, -(2**31), 123_456], lambda r: r.randint(-(2**31), 2**31 - 1)),
    ("l", "bigint", [0, 1, -1, 2**63 - 1, -(2**63), 2**32, -(2**40) + 7], lambda r: r.randint(-(2**63), 2**63 - 1)),
    ("f", "float", [0.0, -0.0, NAN, INF, -INF, 1.5, -2.25, 0.1, 1e-45, 3.4028234663852886e38, -1e-50],
     lambda r: r.uniform(-1e6, 1e6)),
    ("d", "double", [0.0, -0.0, NAN, INF, -INF, 1.5, 0.1, 5e-324, 1.7976931348623157e308, -123.456],
     lambda r: r.uniform(-1e12, 1e12)),
    ("dec_10_2", "decimal(10,2)",
     [Decimal("0"), Decimal("0.01"), Decimal("-0.01"), Decimal("12345678.99"), Decimal("-99999999.99"),
      Decimal("1.5"), Decimal("7")], lambda r: Decimal(f"{r.randint(-(10**10) + 1, 10**10 - 1)}E-2")),
    ("dec_18_0", "decimal(18,0)", [Decimal(0), Decimal(10**18 - 1), Decimal(-(10**18) + 1), Decimal(-5)],
     lambda r: Decimal(r.randint(-(10**18) + 1, 10**18 - 1))),
    ("dec_19_0", "decimal(19,0)",
     [Decimal(v) for v in (0, 1, -1, 127, 128, -128, -129, 255, 256, 2**63, -(2**63) - 1, 10**19 - 1, -(10**19) + 1)],
     lambda r: Decimal(r.randint(-(10**19) + 1, 10**19 - 1))),
    ("dec_38_18", "decimal(38,18)",
     [Decimal("0"), Decimal("1.5"), Decimal("-1.000000000000000001"),
      Decimal("12345678901234567890.123456789012345678"), Decimal("-99999999999999999999.999999999999999999"),
      Decimal("0.000000000000000001")],
     lambda r: Decimal(f"{r.randint(-(10**38) + 1, 10**38 - 1)}E-18")),
    ("dec_38_0", "decimal(38,0)", [Decimal(10**38 - 1), Decimal(-(10**38) + 1), Decimal(2**64), Decimal(-(2**64))],
     lambda r: Decimal(r.randint(-(10**38) + 1, 10**38 - 1))),
    ("str", "string", _strings(), lambda r: "".join(r.choice(ASCII + "éü日😀") for _ in range(r.randint(0, 70)))),
    ("bin", "binary", [bytes(range(n)) for n in range(0, 41)] + [b"\xff" * 3, b"\x00\xff\x80"],
     lambda r: r.randbytes(r.randint(0, 70))),
    ("dt", "date", [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(1, 1, 1), dt.date(9999, 12, 31),
                    dt.date(1900, 3, 1), dt.date(2024, 2, 29)],
     lambda r: dt.date.fromordinal(r.randint(1, dt.date(9999, 12, 31).toordinal()))),
    ("ts", "timestamp", _timestamps(UTC)[:-1] + [dt.datetime(2024, 2, 29, 8, 30, 15, 123_456, tzinfo=IST)],
     lambda r: dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=r.randint(-6 * 10**16, 25 * 10**16))),
    ("ntz", "timestamp_ntz", _timestamps(None),
     lambda r: dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=r.randint(-6 * 10**16, 25 * 10**16))),
    ("arr", "array<int>", [[], [1], [1, None, 3], [-1] * 5, [None]],
     lambda r: [r.choice([None, r.randint(-(2**31), 2**31 - 1)]) for _ in range(r.randint(0, 4))]),
    ("st", "struct<a:string,b:bigint>", [("x", 1), (None, 2), ("y", None), ("", 0)],
     lambda r: (r.choice([None, "k" * r.randint(0, 9)]), r.choice([None, r.randint(-(2**63), 2**63 - 1)]))),
    ("nested", "array<struct<x:double,y:array<string>>>", [[(0.5, ["a", None]), None, (-0.0, [])], []],
     lambda r: [(r.random(), ["s" * r.randint(0, 3)]) for _ in range(r.randint(0, 2))]),
]
NAMES = [name for name, *_ in COLUMNS]
MULTI_COLUMN_KEYS = [("str", "i"), ("str", "l"), ("l", "str", "dt"), ("dec_10_2", "f", "bin", "ts"), ("st", "arr", "b"),
                     tuple(NAMES)]
HASHED = [(name,) for name in NAMES] + MULTI_COLUMN_KEYS
EDGE_ROWS = max(len(edges) for _, _, edges, _ in COLUMNS)
RANDOM_ROWS = 200


def _rows() -> list[tuple[Any, ...]]:
    rng = random.Random(22)
    rows = [tuple(edges[i % len(edges)] for _, _, edges, _ in COLUMNS) for i in range(EDGE_ROWS)]
    for _ in range(RANDOM_ROWS):  # about one column in eight is null
        rows.append(tuple(None if rng.random() < 0.125 else make(rng) for _, _, _, make in COLUMNS))
    return [(index, *row) for index, row in enumerate(rows)]


def _alias(columns: tuple[str, ...], num_key_groups: int = 0) -> str:
    return "__".join(columns) + (f"__pmod{num_key_groups}" if num_key_groups else "")


@pytest.fixture(scope="module")
def spark_hashes(tmp_path_factory):
    """Python rows, their pyspark schema and, per row id, what Spark computes: xxhash64 of every column alone and
    of the multi-column keys, and pmod of each by every key-group count. One query."""
    from local_spark import local_spark_session
    from pyspark.sql import functions as F

    spark = local_spark_session(tmp_path_factory.mktemp("warehouse"))
    rows = _rows()
    schema = "id int, " + ", ".join(f"{name} {spark_type}" for name, spark_type, _, _ in COLUMNS)
    df = spark.createDataFrame(rows, schema)
    selected = [F.col("id")]
    for columns in HASHED:
        hashed = F.xxhash64(*columns)
        selected.append(hashed.alias(_alias(columns)))
        selected += [F.pmod(hashed, F.lit(n)).alias(_alias(columns, n)) for n in NUM_KEY_GROUPS]
    computed = {row["id"]: row.asDict() for row in df.select(*selected).collect()}
    assert len(computed) == len(rows)
    return rows, df.schema, computed


def _mismatches(found: list[str]) -> str:
    return f"{len(found)} mismatches, the first: " + "; ".join(found[:8])


@pytest.mark.spark
def test_the_twin_computes_sparks_xxhash64_and_key_group_for_every_type(spark_hashes):
    rows, schema, computed = spark_hashes
    types = {field.name: field.dataType for field in schema.fields}  # pyspark DataType objects
    wrong = []
    for row in rows:
        values = dict(zip(["id", *NAMES], row))
        spark = computed[values["id"]]
        for columns in HASHED:
            key = [values[c] for c in columns]
            key_types = [types[c] for c in columns]
            if spark_xxhash64(key, key_types) != spark[_alias(columns)]:
                wrong.append(f"xxhash64{tuple(columns)} of {key!r}")
            for n in NUM_KEY_GROUPS:
                if key_group_of_columns(key, key_types, n) != spark[_alias(columns, n)]:
                    wrong.append(f"pmod(xxhash64{tuple(columns)}, {n}) of {key!r}")
    assert not wrong, _mismatches(wrong)


@pytest.mark.spark
def test_spark_schema_types_read_as_the_ddl_names_they_were_declared_with(spark_hashes):
    _, schema, _ = spark_hashes
    declared = {name: spark_type for name, spark_type, _, _ in COLUMNS}
    for field in schema.fields[1:]:
        assert key_column_type(field.dataType) == key_column_type(declared[field.name]), field.name
    assert key_column_types(schema)[1:] == tuple(key_column_type(t) for t in declared.values())


# harness key built from a row's Python values -> the Spark columns whose types the twin must infer for it
HARNESS_KEYS: list[tuple[tuple[str, ...], Callable[[dict[str, Any]], Any]]] = [
    (("str",), lambda v: v["str"]),
    (("l",), lambda v: v["l"]),
    (("str", "l"), lambda v: (v["str"], v["l"])),
    (("b",), lambda v: v["b"]),
    (("d",), lambda v: v["d"]),
    (("bin",), lambda v: v["bin"]),
    (("dt",), lambda v: v["dt"]),
    (("ts",), lambda v: v["ts"]),
    (("ntz",), lambda v: v["ntz"]),
    (("dec_38_18",), lambda v: v["dec_38_18"]),
    (("i",), lambda v: None if v["i"] is None else np.int32(v["i"])),
    (("s",), lambda v: None if v["s"] is None else np.int16(v["s"])),
    (("f",), lambda v: None if v["f"] is None else np.float32(v["f"])),
    (("st",), lambda v: (v["st"],)),
]


@pytest.mark.spark
def test_harness_keys_get_sparks_key_group_for_the_types_inferred_from_them(spark_hashes):
    rows, _, computed = spark_hashes
    wrong = []
    for row in rows:
        values = dict(zip(["id", *NAMES], row))
        spark = computed[values["id"]]
        for columns, make_key in HARNESS_KEYS:
            key = make_key(values)
            if key is None:
                continue  # a null key is refused (tested below)
            for n in NUM_KEY_GROUPS:
                if key_group_of_key(key, n) != spark[_alias(columns, n)]:
                    wrong.append(f"key {key!r} for {columns} with {n} key groups")
    assert not wrong, _mismatches(wrong)


@pytest.mark.spark
def test_a_python_int_key_of_an_int_column_needs_its_declared_type(spark_hashes):
    rows, _, computed = spark_hashes
    ints = [(row[0], row[1 + NAMES.index("i")]) for row in rows]
    ints = [(row_id, value) for row_id, value in ints if value is not None]
    assert all(key_group_of_key(value, 128, types=["int"]) == computed[row_id]["i__pmod128"] for row_id, value in ints)
    inferred_as_bigint = [key_group_of_key(value, 128) == computed[row_id]["i__pmod128"] for row_id, value in ints]
    assert inferred_as_bigint.count(False) > len(ints) // 2  # the inferred bigint hashes 8 bytes, not Spark's 4


# -- without Spark ------------------------------------------------------------------------------------------------


def test_sparks_documented_example():
    # SELECT xxhash64('Spark', array(123), 2) in Spark's function reference
    assert spark_xxhash64(["Spark", [123], 2], ["string", "array<int>", "int"]) == 5602566077635097486


def test_a_null_column_leaves_the_hash_unchanged():
    assert spark_xxhash64([None], ["string"]) == 42
    assert spark_xxhash64(["a", None, 7], ["string", "int", "bigint"]) == spark_xxhash64(["a", 7], ["string", "bigint"])


def test_the_fast_path_for_str_and_int_keys_matches_the_declared_types():
    for n in NUM_KEY_GROUPS:
        for text in _strings():
            assert key_group_of_key(text, n) == key_group_of_columns([text], ["string"], n)
        for number in (0, 1, -1, 2**63 - 1, -(2**63), 123_456_789):
            assert key_group_of_key(number, n) == key_group_of_columns([number], ["bigint"], n)


@pytest.mark.parametrize("ddl, expected", [
    ("INT", "int"), ("integer", "int"), ("long", "bigint"), ("short", "smallint"), ("byte", "tinyint"),
    ("bool", "boolean"), ("real", "float"), ("timestamp_ltz", "timestamp"), ("varchar(20)", "string"),
    ("decimal", "decimal(10,0)"), ("DEC(5)", "decimal(5,0)"), ("numeric(20, 3)", "decimal(20,3)"),
    ("string collate UTF8_BINARY", "string"), ("array<struct<x: bigint, `y z`: varchar(3) NOT NULL>>",
                                                "array<struct<x:bigint,`y z`:string>>"),
])
def test_spark_ddl_type_names_and_their_aliases_parse(ddl, expected):
    assert str(key_column_type(ddl)) == expected
    assert key_column_type(expected) == key_column_type(ddl)  # the canonical name reads back as the same type


@pytest.mark.parametrize("ddl, problem", [
    ("map<string,int>", "cannot be hashed"), ("interval day to second", "cannot be hashed"),
    ("char(3)", "pads its values"), ("string collate UTF8_LCASE", "collation"), ("decimal(39,2)", "precision"),
    ("decimal(5,6)", "scale"), ("array<int", "expected '>'"), ("int int", "unexpected"), ("", "not a Spark DDL"),
    ("in$t", "not a Spark DDL"),
])
def test_unsupported_or_malformed_type_names_are_refused(ddl, problem):
    with pytest.raises(ConfigurationError, match="key column type") as error:
        key_column_type(ddl)
    assert problem in str(error.value)


def test_pyspark_data_types_are_read_without_a_session():
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("k", T.IntegerType()), T.StructField("d", T.DecimalType(12, 4))])
    assert key_column_types(schema) == (KeyColumnType("int"), KeyColumnType("decimal", 12, 4))
    assert key_column_types(T.TimestampNTZType()) == (KeyColumnType("timestamp_ntz"),)
    odd_names = T.ArrayType(T.StructType([T.StructField("a b", T.ShortType()), T.StructField("c", T.BinaryType())]))
    assert str(key_column_type(odd_names)) == "array<struct<`a b`:smallint,c:binary>>"
    with pytest.raises(ConfigurationError, match="cannot be hashed"):
        key_column_type(T.MapType(T.StringType(), T.IntegerType()))
    with pytest.raises(ConfigurationError, match="a key column type must be"):
        key_column_type(3)


def test_types_are_inferred_from_harness_keys_as_documented():
    key = ("a", 1, 1.5, True, b"x", dt.date(2020, 1, 1), dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, tzinfo=UTC),
           Decimal("1.5"), None, ("n", 2), np.int32(3), np.float32(1.0), np.int8(1))
    assert [str(t) for t in infer_key_types(key)] == [
        "string", "bigint", "double", "boolean", "binary", "date", "timestamp_ntz", "timestamp", "decimal(38,18)",
        "void", "struct<_1:string,_2:bigint>", "int", "float", "tinyint"]
    assert infer_key_types("k") == (KeyColumnType("string"),)


@pytest.mark.parametrize("key, error, message", [
    (None, NullKeyError, "None"),
    (object(), UnsupportedKeyTypeError, "has type object"),
    (("a", [1, 2]), UnsupportedKeyTypeError, "key column 1"),
    ((), UnsupportedKeyTypeError, "empty tuple"),
])
def test_keys_without_a_spark_type_are_refused(key, error, message):
    with pytest.raises(error, match=message):
        infer_key_types(key)


@pytest.mark.parametrize("values, types, message", [
    (["x"], ["int"], "key column 0: the key value 'x' .* does not fit key column type int: it takes an int"),
    ([True], ["bigint"], "takes an int"),
    ([128], ["tinyint"], "holds -128..127"),
    ([2**63], ["bigint"], "holds"),
    ([Decimal("1.234")], ["decimal(10,2)"], "2 digits after the point"),
    ([Decimal("123456789")], ["decimal(10,2)"], "8 digits before the point"),
    ([Decimal("NaN")], ["decimal(10,2)"], "finite"),
    ([Decimal("1E+999999999")], ["decimal(38,0)"], "38 digits before the point"),
    ([Decimal("1E-999999999")], ["decimal(38,2)"], "2 digits after the point"),
    ([10**400], ["double"], "beyond the double range"),
    ([1.5], ["decimal(10,2)"], "finite decimal"),
    ([dt.datetime(2020, 1, 1)], ["timestamp"], "tz-aware"),
    ([dt.datetime(2020, 1, 1, tzinfo=UTC)], ["timestamp_ntz"], "naive"),
    ([dt.datetime(2020, 1, 1)], ["date"], r"\.date\(\)"),
    (["\ud800"], ["string"], "not valid Unicode"),
    ([("a",)], ["struct<a:string,b:int>"], "tuple of 2 fields"),
    ([5], ["array<int>"], "takes a list"),
    ([1, 2], ["int"], "one value per key column type"),
    ("ab", ["string", "string"], "as a sequence"),
])
def test_values_that_do_not_fit_their_declared_type_are_refused(values, types, message):
    with pytest.raises(ConfigurationError, match=message):
        spark_xxhash64(values, types)


def test_key_shape_and_key_group_count_are_checked():
    with pytest.raises(ConfigurationError, match=r"one value per key column type \(string, int\)"):
        key_group_of_key("a", 8, types=["string", "int"])
    with pytest.raises(ConfigurationError, match="key column 1: .* holds"):
        key_group_of_key(("a", 2**40), 8, types=["string", "int"])
    with pytest.raises(NullKeyError):
        key_group_of_key(None, 8, types=["string"])
    assert key_group_of_key(("a",), 8, types=["string"]) == key_group_of_key("a", 8)
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ConfigurationError, match="num_key_groups"):
            key_group_of_key(("a", 1), bad)
    with pytest.raises(ConfigurationError, match="num_key_groups"):
        key_group_of_key("a", 0)
