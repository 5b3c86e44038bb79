"""A harness's temporary directories: gone when it closes, and at the latest when the process that made them exits,
so a harness that is never closed leaves nothing behind (but a forked child never removes its parent's)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from examples.session_gap import SessionGapFunction
from keyedstate.testing import KeyedProcessHarness

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

OPEN_AND_LEAVE = """
import os, sys
from examples.session_gap import SessionGapFunction
from keyedstate.testing import KeyedProcessHarness

harness = KeyedProcessHarness(SessionGapFunction(), lambda event: event["user"], backend=sys.argv[1]).open()
harness.process_element({"user": "a", "action": "x"}, 1_000)
harness.snapshot()  # its checkpoint directory outlives close(): only the exit removes it
print(len(os.listdir(os.environ["TMPDIR"])), flush=True)
if sys.argv[2] == "fork":
    child = os.fork()
    if child == 0:
        sys.exit(0)  # a normal exit of a child: atexit runs here too
    os.waitpid(child, 0)
    print(len(os.listdir(os.environ["TMPDIR"])), flush=True)
# no close()
"""


def run_leaving_a_harness_open(tmp_path, backend: str, fork: str) -> list[int]:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(OPEN_AND_LEAVE), backend, fork],
                               env={**os.environ, "TMPDIR": str(temporary), "PYTHONPATH": REPOSITORY},
                               capture_output=True, text=True, timeout=120, check=True)
    assert not list(temporary.iterdir()), "left behind: " + ", ".join(p.name for p in temporary.iterdir())
    return [int(line) for line in completed.stdout.split()]


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_harness_never_closed_leaves_no_directory_once_its_process_exits(tmp_path, backend):
    (made,) = run_leaving_a_harness_open(tmp_path, backend, "no-fork")
    assert made >= 1  # they existed while the process ran


def test_a_forked_child_that_exits_leaves_its_parents_directories_alone(tmp_path):
    # heap: a child forked from a process running RocksDB's threads may hang at exit
    made, after_child = run_leaving_a_harness_open(tmp_path, "heap", "fork")
    assert after_child == made >= 1  # the checkpoint directory is still there


def test_closing_a_harness_without_snapshots_removes_its_directories_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    harness = KeyedProcessHarness(SessionGapFunction(), lambda event: event["user"], backend="rocksdb").open()
    assert list(tmp_path.iterdir())
    harness.close()
    assert not list(tmp_path.iterdir())
