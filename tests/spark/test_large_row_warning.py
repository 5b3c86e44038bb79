"""Row mode's cliff is announced: when a key group's state row passes 1 MiB, the Python worker logs a WARNING (logger
``keyedstate.spark``), once per worker, naming the key group, the row's size and ``state_backend="rocksdb"``.
RocksDB mode writes only what changed and never logs it."""

from __future__ import annotations

import pytest

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.spark import keyed_process
from tests.spark.file_stream import write_input
from tests.spark.worker_logs import log_warnings_to

pytestmark = pytest.mark.spark

KEYS = 6_000  # 6,000 keys x ~200 bytes: a 1.2 MB row in the only key group


class KeepsPayload(KeyedProcessFunction):
    def __init__(self, log_directory: str) -> None:
        self.log_directory = log_directory

    def open(self, runtime_context):
        log_warnings_to(self.log_directory)
        self.payload = runtime_context.get_state(ValueStateDescriptor("payload", Types.STRING()))

    def process_element(self, value, ctx):
        self.payload.update(value.payload)
        return ()


def _warnings(spark, tmp_path, **options) -> list[list[str]]:
    """Two batches over the same keys; each worker's log lines about the row."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for batch in range(2):
        write_input(tmp_path / "in", batch, [{"user": f"u{i:05d}", "payload": f"{batch}{i:0199d}",
                                              "ts": "2024-01-01T00:00:00Z"} for i in range(KEYS)])
    source = (spark.readStream.schema("user STRING, payload STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
              .json(str(tmp_path / "in")).withWatermark("ts", "1 minute"))
    output = keyed_process(source, ["user"], KeepsPayload(str(logs)), "user STRING", event_time_column="ts",
                           num_key_groups=1, **options)
    query = (output.writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination()
    assert {"0", "1"} <= {path.name for path in (tmp_path / "checkpoint" / "commits").iterdir()}
    return [[line for line in log.read_text().splitlines() if "state row" in line] for log in logs.iterdir()]


def test_row_mode_warns_once_per_worker_when_a_key_groups_row_passes_a_mebibyte(spark, tmp_path):
    per_worker = _warnings(spark, tmp_path)
    lines = [line for lines in per_worker for line in lines]
    assert lines and all(len(lines) <= 1 for lines in per_worker), per_worker
    assert lines[0].startswith("keyedstate.spark WARNING keyed_process key group 0, batch ")
    assert 'row mode (state_backend="heap") rewrites this key group\'s whole state, 1.2 MiB, ' in lines[0]
    assert 'state_backend="rocksdb" writes only what changed' in lines[0]


def test_rocksdb_mode_never_warns_about_rows(spark, tmp_path):
    per_worker = _warnings(spark, tmp_path, state_backend="rocksdb", state_storage=str(tmp_path / "storage"))
    assert per_worker == [[] for _ in per_worker], per_worker
