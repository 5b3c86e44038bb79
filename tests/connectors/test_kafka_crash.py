"""SIGKILL of the Spark driver mid-batch: offsets are never committed beyond Spark, the restart loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_helpers import (
    CommitMonitor,
    committed_offsets,
    create_topic,
    last_committed_end,
    produce,
    read_sink,
    spark_log_batches,
    unique,
    wait_for,
)
from tests.short_lived_jvms import short_lived_jvm_environment

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.driver_process]

APP = Path(__file__).with_name("kafka_driver_app.py")
ROOT = Path(__file__).resolve().parents[2]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    env = short_lived_jvm_environment(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                                      PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, str(APP), *args], stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def test_sigkill_mid_batch_then_restart_is_exactly_once(kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 2)
    group = unique("g")
    produce(bs, topic, 600, 2)
    ckpt, out = str(tmp_path / "ckpt"), tmp_path / "out"
    out.mkdir()
    args = [bs, topic, group, ckpt, str(out)]
    proc = _start(args + ["slow"], tmp_path / "slow.log")
    try:
        with CommitMonitor(bs, group, topic, 2, ckpt) as monitor:
            # batch 2 has started (0 and 1 are in Spark's commit log; each batch sleeps 2 s before writing output)
            wait_for(lambda: (out / "started-2").exists() or proc.poll() is not None, 240, "batch 2 to start")
            assert proc.poll() is None, (tmp_path / "slow.log").read_text()[-3000:]
            _killpg(proc)
            committed_ids = spark_log_batches(ckpt, "commits")
            last_id, spark_end = last_committed_end(ckpt, topic)
            after_kill = committed_offsets(bs, group, topic, 2)
        assert committed_ids == [0, 1], "the kill was supposed to hit batch 2 before Spark committed it"
        assert monitor.samples > 5 and monitor.violations == []
        for p, off in after_kill.items():
            assert off <= spark_end[p]
        assert after_kill, "batches 0 and 1 were committed by Spark, so offsets must have been committed too"
    finally:
        _killpg(proc)

    # Restart from the checkpoint: the interrupted batch is replayed with the same offsets, then the rest.
    proc = _start(args + ["finish"], tmp_path / "finish.log")
    try:
        assert proc.wait(300) == 0, (tmp_path / "finish.log").read_text()[-3000:]
    finally:
        _killpg(proc)
    rows = read_sink(out)
    assert sorted(int(v) for v, _, _ in rows) == list(range(600))  # nothing lost, nothing duplicated
    _, final_end = last_committed_end(ckpt, topic)
    assert final_end == {0: 300, 1: 300}
    assert committed_offsets(bs, group, topic, 2) == final_end
