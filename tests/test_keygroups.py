"""Key groups follow Flink's assignment: stable hash, contiguous ranges per partition."""

from __future__ import annotations

import subprocess
import sys

import pytest

from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import (
    KeyGroupRange,
    key_group_for_key,
    key_group_range_for_partition,
    partition_for_key_group,
)


def test_key_groups_are_stable_across_processes():
    keys = [f"user-{i}" for i in range(20)]
    here = [key_group_for_key(k, 128) for k in keys]
    script = f"from keyedstate.keygroups import key_group_for_key; print([key_group_for_key(k, 128) for k in {keys!r}])"
    there = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert str(here) == there.strip()


def test_keys_spread_over_all_key_groups():
    groups = [key_group_for_key(i, 128) for i in range(20_000)]
    counts = [groups.count(g) for g in range(128)]
    assert min(counts) > 100  # about 156 each; a broken hash leaves groups empty


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
    with pytest.raises(ConfigurationError, match="max_parallelism"):
        key_group_range_for_partition(0, 200, 128)
