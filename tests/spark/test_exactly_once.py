"""Exactly-once keyed state: a job killed with SIGKILL at three points and restarted each time ends with the same
output and the same state as a job that was never interrupted."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.short_lived_jvms import short_lived_jvm_environment
from tests.spark.conftest import DEFAULT_PROVIDER, ROCKSDB_PROVIDER
from tests.spark.exactly_once_job import run_job
from tests.spark.file_stream import wait_until, write_input

# Only the SIGKILL test is marked driver_process (`make test` runs it beside the suite); the task-retry test starts a
# driver of its own too but kills nothing and takes half a minute, so it runs with the suite, which has time to spare.
pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).with_name("exactly_once_job.py")
T0 = 1_704_067_200_000
FILES = 10


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def write_all_input(base: Path) -> None:
    for index in range(FILES):
        rows = [
            {"user": f"u{(index * 7 + i) % 10}", "payload": f"{'ab'[i % 2]}-{index}-{i}",
             "ts": iso(T0 + index * 20_000 + i * 500)}
            for i in range(12)
        ]
        write_input(base / "in", index, rows)
    # Two far-later events: the first moves the watermark past every timer, the second's batch fires them.
    write_input(base / "in", FILES, [{"user": "flush", "payload": "z-0", "ts": iso(T0 + 3_600_000)}])
    write_input(base / "in", FILES + 1, [{"user": "flush", "payload": "z-1", "ts": iso(T0 + 3_600_001)}])


def start_job(base: Path, provider: str, backend: str = "heap", **env: str) -> subprocess.Popen:
    environment = short_lived_jvm_environment(**env)
    log = open(base / "job.log", "ab")
    return subprocess.Popen([sys.executable, str(JOB), str(base), provider, backend], env=environment, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def kill_hard(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # driver, JVM and Python workers: a real crash
    process.wait(timeout=60)


def run_to_completion(base: Path, provider: str, backend: str = "heap") -> None:
    process = start_job(base, provider, backend)
    assert process.wait(timeout=600) == 0, (base / "job.log").read_text()[-3000:]


def committed_batches(base: Path) -> int:
    commits = base / "checkpoint" / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def results(spark, base: Path):
    from keyedstate.spark import read_keyed_state

    output = sorted(tuple(row) for row in spark.read.schema(
        "user STRING, count BIGINT, payloads STRING, kinds STRING").json(str(base / "out")).collect())
    return output, read_keyed_state(spark, str(base / "checkpoint"))


@pytest.fixture(scope="module")
def uninterrupted(spark, tmp_path_factory):
    """The job's query run once without interruption, in this process's session (a driver of its own would cost a
    JVM start and add nothing: the job's query is the same code)."""
    base = tmp_path_factory.mktemp("uninterrupted")
    write_all_input(base)
    run_job(spark, str(base), {"state_backend": "heap"})
    return results(spark, base)


# Each state backend once, each of Spark's state store providers once: the four combinations cost four minutes of
# CI and add no path the two do not take (the compatibility job runs the first pair on every other Spark line).
PROVIDER_AND_BACKEND = [
    pytest.param(ROCKSDB_PROVIDER, "heap", id="rocksdb-store-heap"),
    pytest.param(DEFAULT_PROVIDER, "rocksdb", id="default-store-rocksdb"),
]


@pytest.mark.driver_process
@pytest.mark.parametrize("state_store_provider, backend", PROVIDER_AND_BACKEND)
def test_sigkill_at_three_points_then_restart_gives_the_uninterrupted_result(spark, tmp_path, uninterrupted,
                                                                           state_store_provider, backend):
    write_all_input(tmp_path)
    marker = tmp_path / "paused"

    # 1. Inside process_element of batch 2.
    job = start_job(tmp_path, state_store_provider, backend, PAUSE_BATCH="2", PAUSE_AT="element")
    wait_until(marker.exists, 420, "the job to pause inside process_element of batch 2")
    kill_hard(job)
    assert committed_batches(tmp_path) == 2

    # 2. Right after a batch committed (whatever the job was doing then).
    job = start_job(tmp_path, state_store_provider, backend)
    wait_until(lambda: committed_batches(tmp_path) >= 5, 420, "batch 4 to commit")
    kill_hard(job)

    # 3. Inside on_timer of a later batch.
    marker.unlink()
    first_timer_batch = committed_batches(tmp_path) + 1
    job = start_job(tmp_path, state_store_provider, backend, PAUSE_BATCH=str(first_timer_batch), PAUSE_AT="timer")
    wait_until(marker.exists, 420, f"the job to pause inside on_timer of batch {first_timer_batch}")
    kill_hard(job)

    run_to_completion(tmp_path, state_store_provider, backend)

    output, state = results(spark, tmp_path)
    expected_output, expected_state = uninterrupted
    assert len(expected_output) >= 10  # every user emitted at least once
    assert output == expected_output
    assert len(output) == len(set(output))  # no duplicates
    assert state == expected_state


def test_a_task_attempt_that_fails_after_writing_state_is_retried_from_the_committed_state(spark, tmp_path,
                                                                                          uninterrupted, state_backend):
    write_all_input(tmp_path)
    process = start_job(tmp_path, ROCKSDB_PROVIDER, state_backend["state_backend"], FAIL_BATCH="3")
    assert process.wait(timeout=600) == 0, (tmp_path / "job.log").read_text()[-3000:]
    assert (tmp_path / "failed-once").exists()  # the first attempts really failed mid-batch
    output, state = results(spark, tmp_path)
    assert (output, state) == uninterrupted
