"""The harness puts a key in the key group Spark does: ``pmod(xxhash64(key columns), num_key_groups)``.

For keys of every key column type keyed state can hold, one Spark query computes each key's key group and a harness
fed those keys must hold each key's state in exactly that key group of its snapshot (declared types, and inferred
types where a Python value infers its column's type). Then a bootstrap written by Spark and a harness snapshot of the
same elements must agree row by row: same key groups, same keys in each, same state.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from keyedstate import KeyedProcessFunction, KeyedStateBootstrapFunction, Types, ValueStateDescriptor
from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.errors import SerializationError
from keyedstate.spark import bootstrap_keyed_state
from keyedstate.spark.state_reader import decode_state_row
from keyedstate.state.key_groups.initial_state import InitialState, read_bootstrap_manifest
from keyedstate.state.key_groups.row_format import StateRow
from keyedstate.testing import KeyedProcessHarness

pytestmark = [pytest.mark.spark]

NUM_KEY_GROUPS = 16
UTC = dt.timezone.utc
# Spark type, keys (harness values), whether a harness infers the type from those Python values
KEYS = [
    ("boolean", [True, False], True),
    ("tinyint", [0, -128, 127, 5], False),
    ("smallint", [0, -32768, 32767, 300], False),
    ("int", [0, -(2**31), 2**31 - 1, 77], False),
    ("bigint", [0, -(2**63), 2**63 - 1, 2**40], True),
    ("float", [0.0, -0.0, 1.5, -3.25], False),
    ("double", [0.0, -0.0, 0.1, 1e300], True),
    ("string", ["", "a", "日本語", "x" * 40], True),
    ("binary", [b"", b"\x00\xff", b"key"], True),
    ("date", [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2024, 2, 29)], True),
    ("timestamp", [dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(2024, 2, 29, 8, 30, 15, 123_456, tzinfo=UTC)],
     True),
    ("timestamp_ntz", [dt.datetime(1970, 1, 1), dt.datetime(1900, 3, 1, 12, 0, 0, 1)], True),
    ("struct<a:string,b:bigint>", [("x", 1), ("", -5), ("y", 2**40)], True),
]
ROWS = max(len(keys) for _, keys, _ in KEYS)
SEEN = ValueStateDescriptor("seen", Types.LONG())


class Remember(KeyedProcessFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_state(SEEN)

    def process_element(self, value, ctx):
        self.seen.update(value["n"])


class RememberSeed(KeyedStateBootstrapFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_state(SEEN)

    def process_element(self, value, ctx):
        self.seen.update(value["n"])


def _column(index: int) -> str:
    return f"c{index}"


@pytest.fixture(scope="module")
def spark_key_groups(spark):
    """``{(column, row): pmod(xxhash64(key), NUM_KEY_GROUPS)}`` for every key of KEYS, from one Spark query."""
    from pyspark.sql import functions as F

    schema = "id int, " + ", ".join(f"{_column(i)} {spark_type}" for i, (spark_type, _, _) in enumerate(KEYS))
    rows = [(row, *(keys[row] if row < len(keys) else None for _, keys, _ in KEYS)) for row in range(ROWS)]
    frame = spark.createDataFrame(rows, schema)
    groups = [F.pmod(F.xxhash64(_column(i)), F.lit(NUM_KEY_GROUPS)).alias(_column(i)) for i in range(len(KEYS))]
    computed = {}
    for result in frame.select("id", *groups).collect():
        for index, (_, keys, _) in enumerate(KEYS):
            if result["id"] < len(keys):
                computed[index, result["id"]] = result[_column(index)]
    return computed


def _snapshot_key_groups(harness: KeyedProcessHarness) -> dict:
    """``{key: key group}`` of every key whose state the harness's snapshot holds, read from its rows."""
    where = {}
    for key_group, row in harness.snapshot().rows.items():
        for key in decode_state_row(StateRow.from_row(row), [SEEN]):
            where[key] = key_group
    return where


@pytest.mark.parametrize("inferred", [False, True], ids=["declared", "inferred"])
def test_the_harness_puts_keys_of_every_type_in_sparks_key_group(spark_key_groups, inferred):
    checked = 0
    for index, (spark_type, keys, infers) in enumerate(KEYS):
        if inferred and not infers:
            continue
        key_types = None if inferred else [spark_type]
        with KeyedProcessHarness(Remember(), lambda e: e["key"], num_key_groups=NUM_KEY_GROUPS,
                                 key_types=key_types) as harness:
            for n, key in enumerate(keys):
                harness.process_element({"key": key, "n": n})
            stored = _snapshot_key_groups(harness)
            for row, key in enumerate(keys):
                spark_group = spark_key_groups[index, row]
                assert harness.key_group_of_key(key) == spark_group, (spark_type, key)
                assert stored[key] == spark_group, (spark_type, key)
                last = max(r for r, other in enumerate(keys) if other == key)  # -0.0 is the key 0.0, as in Spark
                assert harness.state(key, SEEN).value() == last
                checked += 1
    assert checked == sum(len(keys) for _, keys, infers in KEYS if infers or not inferred)


def test_keys_keyed_state_cannot_hold_are_refused_with_the_fix():
    for spark_type, key in (("decimal(10,2)", Decimal("1.50")), ("array<int>", [1, 2])):
        with KeyedProcessHarness(Remember(), lambda e: e["key"], key_types=[spark_type]) as harness:
            with pytest.raises(SerializationError, match="cannot be used.*Convert the key"):
                harness.process_element({"key": key, "n": 0})


def test_a_spark_bootstrap_and_a_harness_snapshot_hold_each_key_in_the_same_key_group(spark, tmp_path):
    elements = [{"user": f"u{i % 23}", "shard": i % 3 - 1, "n": i} for i in range(60)]
    frame = spark.createDataFrame(elements, "user string, shard int, n bigint")
    bootstrap_keyed_state(frame.coalesce(1), ["user", "shard"], RememberSeed(), path=str(tmp_path / "boot"),
                          num_key_groups=8)
    manifest = read_bootstrap_manifest(str(tmp_path / "boot"), None)
    initial = InitialState(str(tmp_path / "boot"), manifest["bootstrap_id"],
                           {int(g): FileEntry.from_json(e) for g, e in manifest["rows"].items()})
    on_spark = {int(g): decode_state_row(initial.row(int(g)), [SEEN]) for g in manifest["rows"]}

    with KeyedProcessHarness(Remember(), lambda e: (e["user"], e["shard"]), num_key_groups=8,
                             key_types=["string", "int"]) as harness:
        for element in elements:
            harness.process_element(element)
        snapshot = harness.snapshot()
    in_harness = {g: decode_state_row(StateRow.from_row(row), [SEEN]) for g, row in snapshot.rows.items()}

    assert len(on_spark) > 4  # the 60 keys spread over most of the 8 key groups
    assert in_harness == on_spark  # the same keys in every key group, with the same state
    assert sum(len(keys) for keys in on_spark.values()) == len({(e["user"], e["shard"]) for e in elements})
