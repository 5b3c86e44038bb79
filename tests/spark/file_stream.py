"""Drive a file-source -> keyed_process query batch by batch, and replay Spark's own batches into the harness.

Each input batch is one JSON file and the source reads one file per trigger, so Spark's offsets log says exactly
which rows each micro-batch had, with the watermark and timestamp Spark used. :func:`replay_in_harness` feeds the
same batches, watermarks and timestamps to a ``KeyedProcessHarness`` — the oracle the Spark output must equal.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from keyedstate.spark import keyed_process
from keyedstate.testing import KeyedProcessHarness


@dataclass
class SparkBatch:
    batch_id: int
    watermark: int
    timestamp: int
    files: list[int]  # indexes of the input files this batch read (of the first source)
    files_by_source: tuple[list[int], ...] = ()  # the same for every source of the query, in plan order


# Spark's file source takes new files oldest first by modification time; files written in the same instant would
# be read in any order. Input file i gets mtime BASE + i seconds (within the source's default maxFileAge of 7 days).
_MTIME_BASE = int(time.time()) - 86_400


def write_input(directory: Path, index: int, rows: list[dict]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".part-{index:04d}.json.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(tmp, (_MTIME_BASE + index, _MTIME_BASE + index))
    tmp.rename(directory / f"part-{index:04d}.json")  # atomic: the source never sees half a file


def read_batches(checkpoint: Path) -> list[SparkBatch]:
    """Committed micro-batches from the checkpoint's offsets and commits logs (file sources, one offset per file)."""
    committed = {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    batches = []
    previous_offsets: list[int] = []
    for batch_id in sorted(committed):
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        metadata = json.loads(lines[1])
        sources = lines[2:]
        previous_offsets += [-1] * (len(sources) - len(previous_offsets))
        offsets = [json.loads(line)["logOffset"] if line not in ("-", "") else previous
                   for line, previous in zip(sources, previous_offsets)]
        files = tuple(list(range(previous + 1, offset + 1)) for previous, offset in zip(previous_offsets, offsets))
        batches.append(SparkBatch(batch_id, int(metadata["batchWatermarkMs"]), int(metadata["batchTimestampMs"]),
                                  files[0], files))
        previous_offsets = offsets
    return batches


def start_query(spark, base: Path, function, *, schema: str, key_columns: list[str], output_schema: str,
                event_time_column: Optional[str] = "ts", time_mode: str = "event_time",
                num_key_groups: Optional[int] = 7, watermark_delay: str = "0 seconds",
                trigger_ms: Optional[int] = None, query_name: str = "out", sink_path: Optional[Path] = None,
                **kwargs: Any):
    """Start the query; output goes to an in-memory table ``query_name``, or to JSON files at ``sink_path`` (the
    memory sink cannot restart from a checkpoint)."""
    source = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(base / "in"))
    if event_time_column is not None:
        source = source.withWatermark(event_time_column, watermark_delay)
    output = keyed_process(source, key_columns, function, output_schema, event_time_column=event_time_column,
                           time_mode=time_mode, num_key_groups=num_key_groups, **kwargs)
    writer = output.writeStream.outputMode("append").option("checkpointLocation", str(base / "checkpoint"))
    if sink_path is None:
        writer = writer.format("memory").queryName(query_name)
    else:
        writer = writer.format("json").option("path", str(sink_path))
    if trigger_ms is not None:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    return writer.start()


def failure_message(query) -> str:
    """Run ``query`` until it fails (it must), stop it, and return Spark's message of the failure."""
    import pytest
    from pyspark.errors import StreamingQueryException

    try:
        with pytest.raises(StreamingQueryException) as failure:
            query.processAllAvailable()
    finally:
        query.stop()
    return str(failure.value)


def replay_in_harness(function, key_selector: Callable[[Any], Any], batches: list[SparkBatch],
                      inputs: list[list[dict]], *, to_value: Callable[[dict], Any],
                      timestamp_of: Optional[Callable[[dict], int]] = None, key_of: Callable[[dict], Any]) -> list:
    """What the harness outputs for the batches Spark ran: per batch, fire timers (event time, then processing
    time), then each key's elements in event-time order, then processing-time timers that became due."""
    harness = KeyedProcessHarness(function, key_selector)
    harness.open()
    for batch in batches:
        harness.process_watermark(batch.watermark)
        harness.set_processing_time(batch.timestamp)
        rows = [row for index in batch.files for row in inputs[index]]
        order = sorted(range(len(rows)), key=lambda i: (key_of(rows[i]), timestamp_of(rows[i]) if timestamp_of else 0))
        for i in order:
            harness.process_element(to_value(rows[i]), None if timestamp_of is None else timestamp_of(rows[i]))
        harness.set_processing_time(batch.timestamp)
    output = harness.extract_output()
    harness.close()
    return output


def processed_files(checkpoint: Path) -> int:
    """How many input files the committed batches have read (the file source logs one offset per file here)."""
    batches = read_batches(checkpoint) if (checkpoint / "commits").exists() else []
    return max((index + 1 for batch in batches for index in batch.files), default=0)


def wait_for_files(checkpoint: Path, files: int, timeout_s: float = 180) -> None:
    """processAllAvailable() never returns in processing-time mode (every trigger runs a batch), so wait on the
    commit log instead."""
    wait_until(lambda: processed_files(checkpoint) >= files, timeout_s, f"{files} input files to be committed")


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
