"""The demo's fraud detector (three rules, several timers per key) and the demo command itself."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from examples.rich_fraud import INACTIVITY_MS, RichFraudDetector
from keyedstate.testing import KeyedProcessHarness
from tests.short_lived_jvms import short_lived_jvm_environment

ROOT = Path(__file__).resolve().parents[2]


def transaction(amount, merchant="m1"):
    return {"account_id": "acct", "amount": amount, "merchant": merchant}


@pytest.fixture
def harness():
    created = KeyedProcessHarness(RichFraudDetector(), key_selector=lambda t: t["account_id"], backend="rocksdb").open()
    yield created
    created.close()


def test_small_then_large_within_a_minute_alerts_once(harness):
    harness.process_element(transaction(0.5), timestamp=1_000)
    harness.process_element(transaction(900.0), timestamp=50_000)
    harness.process_element(transaction(950.0), timestamp=55_000)
    assert harness.extract_output() == [("acct", "small-then-large", 900.0, 50_000)]


def test_small_then_large_after_the_window_does_not_alert(harness):
    harness.process_element(transaction(0.5), timestamp=1_000)
    harness.process_watermark(61_000)  # the window timer fires and clears the flag
    harness.process_element(transaction(900.0), timestamp=62_000)
    assert harness.extract_output() == []


def test_a_burst_alerts_for_velocity_and_the_window_slides_with_timers(harness):
    for i in range(6):
        harness.process_element(transaction(20.0), timestamp=i * 1_000)
    assert harness.extract_output() == [("acct", "velocity", 20.0, 5_000)]
    assert harness.num_event_time_timers() == 7  # six velocity timers and one inactivity timer
    harness.process_watermark(40_000)  # the burst leaves the window
    for i in range(6):
        harness.process_element(transaction(20.0), timestamp=41_000 + i * 1_000)
    assert harness.extract_output() == [("acct", "velocity", 20.0, 46_000)]  # may alert again after reset


def test_inactivity_clears_all_state_of_the_account(harness):
    harness.process_element(transaction(0.5), timestamp=1_000)
    harness.process_watermark(1_000 + INACTIVITY_MS)
    assert harness.num_event_time_timers() == 0
    assert harness.state("acct", merchants_descriptor()).is_empty()


def merchants_descriptor():
    from keyedstate import MapStateDescriptor, Types

    return MapStateDescriptor("merchants", Types.STRING(), Types.LONG())


@pytest.mark.spark
@pytest.mark.slow
def test_the_demo_runs_on_spark_and_prints_progress_and_alerts(tmp_path):
    env = short_lived_jvm_environment(PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--batches", "3", "--per-batch", "800", "--accounts", "300",
         "--workdir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    progress = [line for line in lines if line.startswith("batch ")]
    assert [line.split(":")[0] for line in progress[:3]] == ["batch   0", "batch   1", "batch   2"]
    assert all("active_keys=" in line and "timers_fired=" in line and "state=" in line for line in progress)
    # keyed_process's numbers come from the query's progress: every input row reached the function
    counts = [{name: float(value) for name, value in re.findall(r"(\w+)=\s*([\d.]+)", line)} for line in progress[:3]]
    assert all(c["rows"] == c["processed"] > 0 and c["active_keys"] > 0 for c in counts), progress
    assert any("ALERT small-then-large" in line for line in lines)
    assert lines[-1].startswith("done in")
