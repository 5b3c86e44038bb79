"""Key groups: Spark's assignment, stable across processes; the stored-key prefix; the harness's contiguous ranges
per partition; one setting, ``num_key_groups`` (``max_parallelism`` is a warned alias in the harness)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import (
    KeyGroupRange,
    key_group_of_columns,
    key_group_of_key,
    key_group_of_stored_key,
    key_group_prefix,
    key_group_range_for_partition,
    num_key_groups_or_alias,
    partition_for_key_group,
)
from keyedstate.testing import KeyedProcessHarness


def test_key_groups_are_stable_across_processes():
    keys = [f"user-{i}" for i in range(20)] + list(range(-5, 15))
    here = [key_group_of_key(k, 128) for k in keys]
    script = f"from keyedstate.keygroups import key_group_of_key; print([key_group_of_key(k, 128) for k in {keys!r}])"
    there = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert str(here) == there.strip()


def test_keys_spread_over_all_key_groups():
    groups = [key_group_of_key(i, 128) for i in range(20_000)]
    counts = [groups.count(g) for g in range(128)]
    assert min(counts) > 100  # about 156 each; a broken hash leaves groups empty


def test_the_prefix_round_trips_every_key_group():
    for key_group in (0, 1, 255, 256, 32767):
        assert key_group_of_stored_key(key_group_prefix(key_group) + b"rest") == key_group


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 128])
def test_partitions_own_contiguous_disjoint_ranges_covering_everything(partitions):
    ranges = [key_group_range_for_partition(i, partitions, 128) for i in range(partitions)]
    assert ranges[0].start == 0 and ranges[-1].end == 127
    for left, right in zip(ranges, ranges[1:]):
        assert right.start == left.end + 1
    for index, owned in enumerate(ranges):
        assert all(partition_for_key_group(g, partitions, 128) == index for g in owned)


def test_flinks_formula_for_three_of_128():
    assert [key_group_range_for_partition(i, 3, 128) for i in range(3)] == [
        KeyGroupRange(0, 42), KeyGroupRange(43, 85), KeyGroupRange(86, 127)
    ]


def test_more_partitions_than_key_groups_is_a_clear_error():
    with pytest.raises(ConfigurationError, match="num_key_groups"):
        key_group_range_for_partition(0, 200, 128)


def test_max_parallelism_is_a_warned_alias_of_num_key_groups():
    assert num_key_groups_or_alias(None, None, "here") == 128
    assert num_key_groups_or_alias(16, None, "here") == 16
    with pytest.warns(DeprecationWarning, match="max_parallelism is a deprecated alias of num_key_groups"):
        assert num_key_groups_or_alias(None, 16, "here") == 16
    with pytest.raises(ConfigurationError, match="both num_key_groups=8 and max_parallelism=16"):
        num_key_groups_or_alias(8, 16, "here")
    with pytest.raises(ConfigurationError, match="num_key_groups must be an int between 1 and 32768"):
        num_key_groups_or_alias(0, None, "here")


class _Remember(KeyedProcessFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.LONG()))

    def process_element(self, value, ctx):
        self.seen.update(value[1])


def test_the_harness_takes_the_alias_warns_and_snapshots_under_one_name():
    with pytest.warns(DeprecationWarning, match="KeyedProcessHarness: max_parallelism is a deprecated alias") as caught:
        harness = KeyedProcessHarness(_Remember(), lambda e: e[0], max_parallelism=16)
    assert caught[0].filename == __file__  # the warning points at the user's call
    with harness:
        harness.process_element(("a", 1))
        snapshot = harness.snapshot()
    assert snapshot.num_key_groups == 16 and harness.backend.num_key_groups == 16
    assert set(snapshot.rows) == {key_group_of_key("a", 16)}
    with pytest.warns(DeprecationWarning):
        assert snapshot.max_parallelism == 16


def test_the_harness_hashes_declared_key_types_and_restores_with_them():
    descriptor = ValueStateDescriptor("seen", Types.LONG())
    keys = [(i, f"k{i}") for i in range(40)]
    with KeyedProcessHarness(_Remember(), lambda e: e[0], num_key_groups=8, key_types=["int", "string"]) as harness:
        for key in keys:
            harness.process_element((key, 7))
        snapshot = harness.snapshot()
    declared = [key_group_of_columns(key, ["int", "string"], 8) for key in keys]
    assert set(snapshot.rows) == set(declared) and snapshot.key_types == ("int", "string")
    assert declared != [key_group_of_key(key, 8) for key in keys]  # inferred, the ints would be bigints
    restored = KeyedProcessHarness.restore(_Remember(), lambda e: e[0], snapshot, partition=1, partitions=2)
    try:
        owned = restored.backend.key_group_range
        mine = [key for key in keys if key_group_of_columns(key, ["int", "string"], 8) in owned]
        assert mine and all(restored.state(key, descriptor).value() == 7 for key in mine)
        assert restored.key_group_of_key(mine[0]) == key_group_of_columns(mine[0], ["int", "string"], 8)
    finally:
        restored.close()
    with pytest.raises(ConfigurationError, match="key column type 'map<string,int>'"):
        KeyedProcessHarness(_Remember(), lambda e: e[0], key_types=["map<string,int>"])
