"""Snapshot in the middle of a stream, restore (also rescaled), continue: the same output as without a break."""

from __future__ import annotations

import random

from examples.session_gap import SessionGapFunction
from keyedstate.keygroups import key_group_of_key, partition_for_key_group
from keyedstate.testing import KeyedProcessHarness


def stream(seed: int = 3):
    """(element, timestamp) and ("watermark", value) steps over 40 users."""
    rng = random.Random(seed)
    steps, now = [], 0
    for _ in range(60):
        for _ in range(rng.randrange(5, 15)):
            now += rng.randrange(0, 4_000)
            steps.append(({"user": f"user-{rng.randrange(40)}", "action": rng.choice("abc")}, now))
        steps.append(("watermark", now - 5_000))
    steps.append(("watermark", 2**63 - 1))
    return steps


def run(harnesses, steps, route):
    for step, value in steps:
        if step == "watermark":
            for harness in harnesses:
                harness.process_watermark(value)
        else:
            harnesses[route(step["user"])].process_element(step, value)
    return sorted(record for harness in harnesses for record in harness.extract_output())


def user_of(event) -> str:
    return event["user"]


def owner_of_three(user: str) -> int:
    return partition_for_key_group(key_group_of_key(user, 128), 3, 128)


def test_restore_into_one_and_into_three_partitions_continues_exactly(backend_kind):
    steps = stream()
    cut = len(steps) // 2
    key = user_of

    uninterrupted = KeyedProcessHarness(SessionGapFunction(), key, backend=backend_kind).open()
    expected = run([uninterrupted], steps, lambda user: 0)
    uninterrupted.close()
    assert len(expected) > 50

    first = KeyedProcessHarness(SessionGapFunction(), key, backend=backend_kind).open()
    before = run([first], steps[:cut], lambda user: 0)
    snapshot = first.snapshot()
    first.close()

    same = KeyedProcessHarness.restore(SessionGapFunction(), key, snapshot, backend=backend_kind)
    assert sorted(before + run([same], steps[cut:], lambda user: 0)) == expected
    same.close()

    three = [
        KeyedProcessHarness.restore(SessionGapFunction(), key, snapshot, backend=backend_kind, partition=i,
                                    partitions=3)
        for i in range(3)
    ]
    assert sorted(before + run(three, steps[cut:], owner_of_three)) == expected
    for harness in three:
        harness.close()


def test_rescaled_partitions_hold_disjoint_timers_that_add_up(backend_kind):
    steps = stream(5)[:200]
    key = user_of
    single = KeyedProcessHarness(SessionGapFunction(), key, backend=backend_kind).open()
    run([single], [s for s in steps if s[0] != "watermark"], lambda user: 0)
    total = single.num_event_time_timers()
    snapshot = single.snapshot()
    single.close()
    parts = [KeyedProcessHarness.restore(SessionGapFunction(), key, snapshot, backend=backend_kind, partition=i,
                                         partitions=3) for i in range(3)]
    counts = [p.num_event_time_timers() for p in parts]
    assert sum(counts) == total and all(counts)
    for part in parts:
        part.close()


def test_a_temporary_checkpoint_dir_outlives_its_harness_only_until_the_process_exits(tmp_path):
    """A closed harness's snapshots stay restorable in the same process; the temporary directory holding their files
    is gone once the process exits (a harness without snapshots removes it at close)."""
    import subprocess
    import sys
    from pathlib import Path

    script = """
import os
from examples.session_gap import SessionGapFunction
from keyedstate.testing import KeyedProcessHarness

def harness():
    return KeyedProcessHarness(SessionGapFunction(gap_ms=1_000), lambda e: e["user"], backend="rocksdb")

unused = harness()
unused.open()
unused.close()
print(unused._checkpoint_dir, os.path.exists(unused._checkpoint_dir))

first = harness()
first.open()
first.process_element({"user": "a", "action": "a"}, 10)
snapshot = first.snapshot()
first.close()
print(first._checkpoint_dir, os.path.exists(first._checkpoint_dir))
restored = KeyedProcessHarness.restore(SessionGapFunction(gap_ms=1_000), lambda e: e["user"], snapshot,
                                       backend="rocksdb")
print(restored.num_event_time_timers())
restored.close()
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr[-2000:]
    unused_line, kept_line, timers = result.stdout.split("\n")[:3]
    assert unused_line.endswith(" False")  # no snapshot: removed at close
    assert kept_line.endswith(" True")  # snapshots taken: kept while the process runs
    assert int(timers) == 1  # and restorable after the harness that took them closed
    assert not Path(kept_line.rsplit(" ", 1)[0]).exists()  # removed when the process exited
