"""The compiled fast path is a twin of the Python implementation: a randomized workload (state of three kinds,
timers of both domains registered and deleted while elements run and while timers fire) gives the same trace of
outputs, state and timers with the extension and with ``KEYEDSTATE_PURE_PYTHON=1``, through the Spark group
function, the operator's key runs and the harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keyedstate.fastpath import PURE_PYTHON_VARIABLE

SEEDS = [str(seed) for seed in range(40)]
REPO = Path(__file__).resolve().parent.parent


def _traces(pure: bool) -> dict[int, dict]:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_VARIABLE}
    if pure:
        env[PURE_PYTHON_VARIABLE] = "1"
    result = subprocess.run([sys.executable, "-m", "tests.fastpath_workload", *SEEDS], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    traces = [json.loads(line) for line in result.stdout.splitlines()]
    return {trace.pop("seed"): trace for trace in traces}


@pytest.mark.compiled_only
def test_the_compiled_and_the_python_implementation_give_identical_traces():
    compiled, pure = _traces(pure=False), _traces(pure=True)
    assert all(trace.pop("compiled") for trace in compiled.values())
    assert not any(trace.pop("compiled") for trace in pure.values())
    for seed in compiled:
        assert compiled[seed] == pure[seed], f"seed {seed} differs"
    text = json.dumps(compiled)
    # the workload reaches what the fast path covers: both domains fire, state survives batches
    assert "tTimeDomain.EVENT_TIME" in text and "tTimeDomain.PROCESSING_TIME" in text
    assert text.count("timeout") > 100
    # the key runs spread the timers over many key groups, and the timers registered, deleted and registered again
    # by callbacks while a batch of due timers fires are compared one by one
    key_groups = {timer[2] for trace in compiled.values() for step in trace["key_runs"][1::3] for domain in step
                  for timer in domain}
    assert len(key_groups) > 8
