"""Kafka in, keyed state, Kafka out, exactly once: the driver is SIGKILLed during a write, between the write and
Spark's commit log entry, and after the commit log entry; each restart resumes from the same checkpoint, and the
last run also retries a task that failed after committing. A read_committed consumer sees every expected output
record exactly once and nothing else."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from kafka_helpers import create_topic, read_committed, spark_batch_end, spark_log_batches, unique, wait_for
from tests.short_lived_jvms import short_lived_jvm_environment

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.driver_process]

APP = Path(__file__).with_name("kafka_sink_driver_app.py")
ROOT = Path(__file__).resolve().parents[2]
USERS = 7
FIRST_RECORDS = 240  # produced at the start: 5 batches of at most 60 (kafka_sink_driver_app.RECORDS_PER_BATCH)
RECORDS = 360  # the rest is produced before the last run, so that run surely has records to write


def _produce_input(bootstrap: str, topic: str, start: int, end: int) -> None:
    """Record i: key u<i % 7>, value i, on partition (i % 7) % 2, timestamps increasing with i (so each user's
    records reach the function in order and its running count is deterministic). The timestamps start now: older
    ones would let time-based retention delete the records before the query reads them."""
    import time

    from confluent_kafka import Producer

    start_ms = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": "true", "linger.ms": 5})
    for i in range(start, end):
        user = i % USERS
        producer.produce(topic, key=f"u{user}".encode(), value=str(i).encode(), partition=user % 2,
                         timestamp=start_ms + i)
    assert producer.flush(60) == 0


def _expected(source_end: Optional[dict[int, int]] = None) -> list[str]:
    """The output for every input record, or for those below ``source_end`` (partition -> offset)."""
    counts: collections.Counter = collections.Counter()
    offsets: collections.Counter = collections.Counter()
    out = []
    for i in range(RECORDS):
        user, partition = f"u{i % USERS}", (i % USERS) % 2
        counts[user] += 1
        offsets[partition] += 1
        if source_end is None or offsets[partition] <= source_end[partition]:
            out.append(f"{user}:{i}:{counts[user]}")
    return sorted(out)


def _start(args: list[str], mode: str, log: Path) -> subprocess.Popen:
    env = short_lived_jvm_environment(
        PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(ROOT), str(APP.parent), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, str(APP), *args, mode], stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Python workers
    except ProcessLookupError:
        pass
    proc.wait(30)


def _run_until(args: list[str], mode: str, log: Path, condition, what: str) -> None:
    proc = _start(args, mode, log)
    try:
        wait_for(lambda: condition() or proc.poll() is not None, 300, what, interval=0.05)
        assert proc.poll() is None, f"the driver exited before {what}:\n" + log.read_text()[-3000:]
    finally:
        _kill(proc)


def _values(bootstrap: str, topic: str) -> list[str]:
    return [v.decode() for _, _, v, _ in read_committed(bootstrap, topic)]


def test_sigkill_at_three_points_and_a_failed_task_still_write_every_record_exactly_once(kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    source, out = create_topic(bs, 2), create_topic(bs, 2)
    _produce_input(bs, source, 0, FIRST_RECORDS)
    ckpt, markers = tmp_path / "ckpt", tmp_path / "markers"
    markers.mkdir()
    args = [bs, source, out, unique("crash"), str(ckpt), str(markers)]
    expected = _expected()

    # 1. killed while partition 0 of batch 1 has produced its records into an open transaction
    _run_until(args, "pause-in-write=1", tmp_path / "run1.log", (markers / "writing-1").exists, "batch 1 writing")
    assert spark_log_batches(str(ckpt), "commits") == [0]
    after_first = _values(bs, out)  # stops at the open transaction's records: none of them is visible
    assert len(after_first) == len(set(after_first)) and set(after_first) <= set(expected)

    # 2. killed after every task of batch 2 committed its transaction, before Spark's commit log entry for it
    _run_until(args, "pause-in-commit=2", tmp_path / "run2.log", (markers / "committing-2").exists,
               "batch 2 committing")
    assert spark_log_batches(str(ckpt), "commits") == [0, 1]
    # batches 0-2 are in Kafka although Spark has not committed batch 2
    assert sorted(_values(bs, out)) == _expected(spark_batch_end(str(ckpt), 2, source))

    # 3. killed right after Spark's commit log entry for batch 3 (batch 2 is replayed first and writes nothing)
    _run_until(args, "run", tmp_path / "run3.log", lambda: 3 in spark_log_batches(str(ckpt), "commits"),
               "batch 3 in the commit log")

    # 4. the rest, with the first partition-0 task failing after its transaction committed; Spark retries it
    _produce_input(bs, source, FIRST_RECORDS, RECORDS)
    proc = _start(args, "finish-with-task-failure", tmp_path / "run4.log")
    try:
        assert proc.wait(300) == 0, (tmp_path / "run4.log").read_text()[-3000:]
    finally:
        _kill(proc)
    assert (markers / "failed-once").exists(), "the injected task failure did not happen"

    final = _values(bs, out)
    duplicates = [v for v, n in collections.Counter(final).items() if n > 1]
    assert duplicates == []
    assert sorted(final) == expected
