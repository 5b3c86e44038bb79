"""The key-group layout: which Spark partition runs each key group.

The balanced layout's promise is checked against Spark itself: Spark's own ``hash`` of every grouping value is the
key group, and Spark's hash partitioning puts key group ``g`` in partition ``g mod partitions``.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pyspark.sql import functions as F

from keyedstate import KeyedProcessFunction
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import MAX_NUM_KEY_GROUPS
from keyedstate.spark import add_key_group_column, keyed_process
from keyedstate.spark.key_group_layout import (
    BALANCED,
    IDENTITY,
    balanced_grouping_value,
    grouping_value_column,
    key_group_of_grouping_value,
    spark_hash_long,
)
from tests.spark.file_stream import write_input

pytestmark = [pytest.mark.spark]


def test_every_key_group_has_a_balanced_grouping_value_that_hashes_to_it():
    values = [balanced_grouping_value(g) for g in range(MAX_NUM_KEY_GROUPS)]
    assert [spark_hash_long(v) for v in values] == list(range(MAX_NUM_KEY_GROUPS))
    assert all(0 <= v < 2**32 for v in values)


def test_the_python_hash_is_sparks_hash(spark):
    generator = random.Random(7)
    values = [balanced_grouping_value(g) for g in range(64)]
    values += [generator.randrange(-(2**63), 2**63) for _ in range(500)] + [0, -1, 2**63 - 1, -(2**63)]
    frame = spark.createDataFrame([(v,) for v in values], "v BIGINT")
    assert {(row.v, row.h) for row in frame.select("v", F.hash("v").alias("h")).collect()} == {
        (v, spark_hash_long(v)) for v in values
    }


@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 7, 200])
def test_balanced_key_groups_land_in_partition_key_group_mod_partitions(spark, partitions):
    num_key_groups = 128
    frame = spark.range(20_000).select(F.concat(F.lit("user-"), F.col("id").cast("string")).alias("user"))
    frame = frame.withColumn("key_group", F.pmod(F.xxhash64("user"), F.lit(num_key_groups)))
    frame = add_key_group_column(frame, ["user"], num_key_groups)
    placed = (
        frame.repartition(partitions, "_keyedstate_key_group")
        .select("key_group", F.spark_partition_id().alias("partition"))
        .distinct()
        .collect()
    )
    assert all(row.partition == row.key_group % partitions for row in placed)
    groups_per_partition = Counter(row.partition for row in placed)
    assert max(groups_per_partition.values()) - min(groups_per_partition.values()) <= 1
    assert len(placed) == num_key_groups


def test_the_identity_layout_groups_by_the_key_group_number(spark):
    frame = spark.range(500).select(F.col("id").cast("string").alias("user"))
    frame = add_key_group_column(frame, ["user"], 7, key_group_layout=IDENTITY)
    assert dict(frame.dtypes)["_keyedstate_key_group"] == "int"
    expected = frame.select(F.pmod(F.xxhash64("user"), F.lit(7)).cast("int").alias("g"))
    assert sorted(frame.select("_keyedstate_key_group").collect()) == sorted(expected.collect())
    assert dict(add_key_group_column(frame.drop("_keyedstate_key_group"), ["user"], 7).dtypes)[
        "_keyedstate_key_group"
    ] == "bigint"


def test_key_group_of_inverts_the_layout_and_rejects_foreign_values():
    for g in (0, 1, 6):
        assert key_group_of_grouping_value(balanced_grouping_value(g), 7, BALANCED) == g
        assert key_group_of_grouping_value(g, 7, IDENTITY) == g
    assert key_group_of_grouping_value(balanced_grouping_value(7), 7, BALANCED) is None
    assert key_group_of_grouping_value(7, 7, IDENTITY) is None
    assert key_group_of_grouping_value(-1, 7, IDENTITY) is None
    # a value whose hash is a valid key group but that the layout never produces
    other = balanced_grouping_value(3) | (1 << 40)
    assert key_group_of_grouping_value(other, 7, BALANCED) is None


def test_an_unknown_layout_is_a_configuration_error(spark):
    with pytest.raises(ConfigurationError, match="key_group_layout must be one of 'balanced', 'identity'"):
        grouping_value_column(F.lit(0), 4, "round_robin")
    with pytest.raises(ConfigurationError, match="key_group_layout"):
        add_key_group_column(spark.range(1).withColumn("user", F.lit("a")), ["user"], 4, key_group_layout="x")


class EmitKeyAndSubtask(KeyedProcessFunction):
    def open(self, runtime_context):
        self.runtime_context = runtime_context

    def process_element(self, value, ctx):
        context = self.runtime_context
        yield ctx.get_current_key(), context.get_index_of_this_subtask(), context.get_number_of_parallel_subtasks()


@pytest.mark.slow
@pytest.mark.parametrize("layout", [BALANCED, IDENTITY])
def test_keyed_process_runs_each_key_group_in_the_partition_its_layout_promises(spark, tmp_path, layout):
    """Through the stateful operator itself: the partition a key's elements are processed in (Spark's
    ``spark_partition_id`` of the output, evaluated in the operator's task) is key group mod partitions for the
    balanced layout, and wherever Spark's hash of the key-group number falls for the identity layout. The runtime
    context names that partition too, although a Python worker runs tasks of several partitions."""
    num_key_groups, partitions = 16, 3
    write_input(tmp_path / "in", 0, [{"user": f"user-{i}", "ts": "2024-01-01T00:00:00Z"} for i in range(300)])
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    try:
        source = spark.readStream.schema("user STRING, ts TIMESTAMP").json(str(tmp_path / "in"))
        output = keyed_process(
            source.withWatermark("ts", "0 seconds"), ["user"], EmitKeyAndSubtask(),
            "user STRING, subtask INT, subtasks INT", event_time_column="ts",
            num_key_groups=num_key_groups, key_group_layout=layout,
        ).withColumn("partition", F.spark_partition_id())
        query = (output.writeStream.format("memory").queryName(f"placement_{layout}")
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    key_group = F.pmod(F.xxhash64("user"), F.lit(num_key_groups)).cast("int")
    identity_partition = F.pmod(F.hash(key_group), F.lit(partitions))  # Spark's own placement of an int column
    placed = spark.sql(f"SELECT * FROM placement_{layout}").select(
        "partition", "subtask", "subtasks", key_group.alias("key_group"), identity_partition.alias("identity_partition")
    ).collect()
    assert len(placed) == 300
    assert all(row.subtask == row.partition and row.subtasks == partitions for row in placed)
    if layout == BALANCED:
        assert all(row.partition == row.key_group % partitions for row in placed)
        partition_of_group = {row.key_group: row.partition for row in placed}
        assert len(partition_of_group) == num_key_groups
        assert sorted(Counter(partition_of_group.values()).values()) == [5, 5, 6]  # 16 key groups over 3
    else:
        assert all(row.partition == row.identity_partition for row in placed)
