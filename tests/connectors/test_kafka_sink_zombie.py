"""A speculative duplicate attempt through Spark: two live attempts of one write partition, the older one resuming
after the newer committed, and a read_committed consumer still sees every record exactly once.

Why this stands for speculation: Spark never launches a speculative copy of a task on a host where an attempt of it
already ran (``TaskSetManager.dequeueTaskFromList`` skips ``speculative && hasAttemptOnHost(index, host)``), and the
executors of a ``local-cluster`` all share one host, so one machine cannot produce real speculation. What
speculation does to the sink is start a second attempt of a write partition while the first is still alive with
its transaction open, and let the first try to commit afterwards. Executor loss does exactly that: the first attempt
of partition 0 produces its records into its transaction and pauses; the test SIGSTOPs its executor JVM and the
JVM's Python processes; the driver stops hearing heartbeats, declares the executor lost and reruns the task on the
other executor (attempt 1, same ``transactional.id``), which commits the batch; then the test SIGCONTs the frozen
processes and the first attempt goes on to commit, like a slow original whose speculative copy won. It must be
fenced and its records must stay invisible.

``kafka_sink_zombie_app.py`` runs the query (one micro-batch) on ``local-cluster[2,1,1024]`` with a 6 s executor
heartbeat timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_helpers import create_topic, produce, read_committed, unique, wait_for
from tests.short_lived_jvms import short_lived_jvm_environment

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.driver_process]

APP = Path(__file__).with_name("kafka_sink_zombie_app.py")
ROOT = Path(__file__).resolve().parents[2]
RECORDS = 40


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry)] = (int(fields[1]), fields[19])
    return table


def _with_descendants(pid: int) -> dict[int, str]:
    """``pid`` and every process below it, each with its start time (so a reused pid is never signalled)."""
    table = _processes()
    found, todo = {pid: table[pid][1]}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, started) in table.items():
            if ppid == parent:
                found[child] = started
                todo.append(child)
    return found


def _signal_all(processes: dict[int, str], sig: int) -> None:
    table = _processes()
    for pid, started in processes.items():
        if table.get(pid, (0, None))[1] == started:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def test_a_zombie_attempt_resuming_after_its_replacement_committed_is_fenced_and_writes_nothing(kafka_broker,
                                                                                             tmp_path):
    bs = kafka_broker.bootstrap
    source, out = create_topic(bs, 2), create_topic(bs, 2)
    produce(bs, source, RECORDS, 2)
    markers = tmp_path / "markers"
    markers.mkdir()
    log = tmp_path / "app.log"
    env = short_lived_jvm_environment(
        PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(ROOT), str(APP.parent), os.environ.get("PYTHONPATH", "")]))
    app = subprocess.Popen([sys.executable, str(APP), bs, source, out, unique("zombie"), str(tmp_path)],
                           stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    frozen: dict[int, str] = {}

    def app_failed() -> bool:
        return app.poll() is not None

    try:
        wait_for(lambda: (markers / "zombie-paused").exists() or app_failed(), 240, "the first attempt to pause")
        assert not app_failed(), log.read_text()[-3000:]
        jvm, *zombie_values = (markers / "zombie-paused").read_text().split()
        # the zombie's records are in the log, inside its open transaction
        wait_for(lambda: set(zombie_values) <= {v.decode() for _, _, v, _ in
                                                read_committed(bs, out, isolation="read_uncommitted")},
                 60, "the first attempt's records to reach the broker")
        # the executor JVM first (it starts no more Python workers), then the pyspark daemon and its workers
        frozen = _with_descendants(int(jvm))
        _signal_all(frozen, signal.SIGSTOP)
        frozen = _with_descendants(int(jvm))
        _signal_all(frozen, signal.SIGSTOP)

        wait_for(lambda: (markers / "retry-committed").exists() or app_failed(), 120,
                 "Spark to give the frozen executor up and rerun the task elsewhere")
        assert not app_failed(), log.read_text()[-3000:]
        (markers / "zombie-release").write_text("go")
        # the Python processes first: a JVM resumed with the worker's SIGTERM pending shuts down, and might take its
        # Python workers along before the zombie got to its commit
        _signal_all({pid: started for pid, started in frozen.items() if pid != int(jvm)}, signal.SIGCONT)
        wait_for(lambda: (markers / "zombie-outcome").exists(), 60, "the first attempt to try to commit")
        _signal_all(frozen, signal.SIGCONT)
        # the batch completes (the app's own shutdown of the cluster is not waited for)
        wait_for(lambda: (tmp_path / "checkpoint" / "commits" / "0").exists() or app_failed(), 120,
                 "Spark to commit the batch")
        assert not app_failed(), log.read_text()[-3000:]
    finally:
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
            app.wait(30)
        _signal_all(frozen, signal.SIGKILL)  # the zombie outlives its executor by design

    attempt, executor, retried_records = (int(x) for x in (markers / "retry-committed").read_text().split())
    assert attempt >= 1 and executor != int(jvm), "the task was not rerun on another executor"
    assert retried_records == len(zombie_values) > 0
    outcome = (markers / "zombie-outcome").read_text()
    assert outcome.startswith("ProducerFencedError: "), outcome

    expected = sorted(f"out-{i}" for i in range(RECORDS))
    visible = sorted(v.decode() for _, _, v, _ in read_committed(bs, out))
    assert visible == expected  # each record once, none of the zombie's aborted copies
    in_log = [v.decode() for _, _, v, _ in read_committed(bs, out, isolation="read_uncommitted")]
    assert sorted(in_log) == sorted(expected + zombie_values)  # the zombie's copies are there, aborted
