"""RocksDB mode on Spark when a task runs two Python workers: the stateful function's and a Python data source
writer's (the keyedstate-kafka sink is one). Either worker may run the function in a later task, so an executor keeps
a copy of a key group's database per worker that runs it, two per core
(:data:`keyedstate.spark.local_databases.MAX_COPIES`): with fewer, key groups are handed from worker to worker (a
flush, close and open each) in most batches."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.spark import keyed_process
from keyedstate.spark.local_databases import MAX_COPIES
from tests.spark.file_stream import write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BATCHES = 8
USERS = 13


def note(directory: str, kind: str) -> None:
    """Record that this process ran ``kind`` in the current task: ``<kind> <task attempt id>`` in its own file."""
    from pyspark import TaskContext

    with open(os.path.join(directory, f"{kind}-{os.getpid()}.txt"), "a") as out:
        out.write(f"{TaskContext.get().taskAttemptId()}\n")


class RecordingSink(DataSource):
    """A Python data source sink that keeps every row it is given, as JSON lines, and notes its worker."""

    @classmethod
    def name(cls) -> str:
        return "keyedstate-test-recording-sink"

    def streamWriter(self, schema, overwrite):
        return RecordingWriter(self.options["directory"])


class RecordingWriter(DataSourceStreamWriter):
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def write(self, iterator):
        rows = [{"user": row["user"], "count": row["count"]} for row in iterator]
        if rows:
            note(self.directory, "sink")
            with open(os.path.join(self.directory, f"rows-{os.getpid()}.jsonl"), "a") as out:
                out.writelines(json.dumps(row) + "\n" for row in rows)
        return WriterCommitMessage()

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


class HandoverLog(logging.FileHandler):
    """The worker's ``keyedstate.spark.rocksdb`` records at DEBUG, in the notes directory, until the test writes
    ``done`` there: the first record after that detaches the handler and gives the logger its level back, so that
    the Spark workers later tests reuse do not keep logging at DEBUG."""

    def __init__(self, directory: str) -> None:
        super().__init__(os.path.join(directory, f"worker-{os.getpid()}.log"), delay=True)
        self.done = os.path.join(directory, "done")
        self.setLevel(logging.DEBUG)

    def attach(self) -> None:
        logger = logging.getLogger("keyedstate.spark.rocksdb")
        if not any(getattr(h, "baseFilename", None) == self.baseFilename for h in logger.handlers):
            logger.addHandler(self)
            logger.setLevel(logging.DEBUG)
        else:
            self.close()

    def emit(self, record: logging.LogRecord) -> None:
        if os.path.exists(self.done):
            logger = logging.getLogger("keyedstate.spark.rocksdb")
            logger.removeHandler(self)
            if not any(isinstance(h, HandoverLog) for h in logger.handlers):
                logger.setLevel(logging.NOTSET)
            self.close()
            return
        super().emit(record)


class CountAndNoteWorkers(KeyedProcessFunction):
    """A count per user; notes the worker that runs it and logs the worker's database handovers."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, runtime_context):
        HandoverLog(self.directory).attach()
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        note(self.directory, "function")
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value["user"], count


def task_workers(directory: Path, kind: str) -> dict[str, set[int]]:
    """Task attempt id -> the processes that noted ``kind`` in it."""
    workers: dict[str, set[int]] = {}
    for path in directory.glob(f"{kind}-*.txt"):
        pid = int(path.stem.split("-")[1])
        for task in set(path.read_text().split()):
            workers.setdefault(task, set()).add(pid)
    return workers


def test_a_query_with_a_python_sink_keeps_its_key_groups_in_the_workers_that_ran_them(spark, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (tmp_path / "in").mkdir()
    spark.dataSource.register(RecordingSink)
    source = (spark.readStream.schema("user STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
              .json(str(tmp_path / "in")).withWatermark("ts", "0 seconds"))
    output = keyed_process(source, ["user"], CountAndNoteWorkers(str(notes)), "user STRING, count BIGINT",
                           event_time_column="ts", num_key_groups=8, state_backend="rocksdb",
                           state_storage=str(tmp_path / "state-storage"),
                           state_local_dir=str(tmp_path / "local"))
    query = (output.writeStream.format("keyedstate-test-recording-sink").option("directory", str(notes))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        for index in range(BATCHES):
            minute = f"2024-01-01T00:{index:02d}:00Z"
            write_input(tmp_path / "in", index, [{"user": f"u{(index + i) % USERS}", "ts": minute} for i in range(20)])
            query.processAllAvailable()
    finally:
        query.stop()
        (notes / "done").touch()

    # nothing lost: each user's last count is its number of inputs
    sent = Counter(f"u{(index + i) % USERS}" for index in range(BATCHES) for i in range(20))
    last: dict[str, int] = {}
    for path in notes.glob("rows-*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            last[row["user"]] = max(last.get(row["user"], 0), row["count"])
    assert last == dict(sent)

    # the platform fact the number of copies rests on: the sink writes in another worker than the function's
    function_tasks, sink_tasks = task_workers(notes, "function"), task_workers(notes, "sink")
    shared_tasks = set(function_tasks) & set(sink_tasks)
    assert shared_tasks
    assert all(not function_tasks[task] & sink_tasks[task] for task in shared_tasks)

    function_workers = set().union(*function_tasks.values())
    assert len(function_workers) <= MAX_COPIES  # two per core of local[2]: none had to wait for a copy
    handovers = [line for log in notes.glob("worker-*.log") for line in log.read_text().splitlines()
                 if "to another worker process" in line]
    assert handovers == []
