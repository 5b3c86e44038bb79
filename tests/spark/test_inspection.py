"""The checkpoint inspector (inspect_keyed_state, ``python -m keyedstate inspect``) on real heap and RocksDB-mode
checkpoints: every number equals what read_keyed_state_frame's rows add up to (keys, entries, timers, key groups),
state bytes are the stored records' and equal in both backends, RocksDB mode's storage bytes are its versions',
and the command line prints the same, draws a PNG and reports unreadable checkpoints with its own errors."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from keyedstate.errors import CheckpointNotInspectableError
from keyedstate.keygroups import key_group_of_key
from keyedstate.spark import inspect_keyed_state, read_keyed_state_frame
from keyedstate.spark.state_frame import TIMERS_STATE
from keyedstate.spark_compat import read_state_rows
from keyedstate.state.key_groups.row_format import StateRow, decode_state_payload
from keyedstate.state.rocksdb.versions import VersionRecord
from tests.spark.file_stream import read_batches
from tests.spark.rocksdb_runs import run_batches

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def checkpoints(spark, tmp_path_factory):
    """The shared workload (value, list and map state and event-time timers of 13 keys) run 4 batches in each
    backend: {backend: (checkpoint, state storage or None)}."""
    runs = {}
    for backend in ("heap", "rocksdb"):
        base = tmp_path_factory.mktemp(f"inspect-{backend}")
        options = {"state_backend": "heap"} if backend == "heap" else {
            "state_backend": "rocksdb", "state_storage": str(base / "state-storage"),
            "state_local_dir": str(base / "local")}
        run_batches(spark, base, range(4), **options)
        runs[backend] = (base / "checkpoint", options.get("state_storage"))
    return runs


@pytest.fixture(scope="module")
def inspections(spark, checkpoints):
    return {backend: inspect_keyed_state(spark, str(checkpoint), histogram_bins=7)
            for backend, (checkpoint, _) in checkpoints.items()}


def frame_aggregates(spark, checkpoint: Path) -> dict:
    """What read_keyed_state_frame's rows add up to (collected: the test's state is small)."""
    rows = read_keyed_state_frame(spark, str(checkpoint)).collect()
    states: dict = {}
    timers: list = []
    per_key: dict = {}
    for row in rows:
        key = per_key.setdefault(row["key"], {"entries": 0, "timers": 0})
        if row["state"] == TIMERS_STATE:
            timers += [(t["domain"], t["timestamp"]) for t in row["timers"]]
            key["timers"] += len(row["timers"])
            continue
        value = pickle.loads(row["value"])
        entries = len(value) if isinstance(value, (list, dict)) else 1
        keys_, total = states.get(row["state"], (0, 0))
        states[row["state"]] = (keys_ + 1, total + entries)
        key["entries"] += entries
    return {"keys": per_key, "states": states, "timers": timers}


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_numbers_equal_what_read_keyed_state_frame_adds_up_to(spark, checkpoints, inspections, backend):
    checkpoint, _ = checkpoints[backend]
    inspection = inspections[backend]
    expected = frame_aggregates(spark, checkpoint)
    last = read_batches(checkpoint)[-1]
    assert (inspection.backend, inspection.batch_id, inspection.num_key_groups) == (backend, last.batch_id, 7)
    assert (inspection.watermark_ms, inspection.batch_timestamp_ms) == (last.watermark, last.timestamp)
    assert inspection.keys == len(expected["keys"]) == 13
    assert {s.name: (s.keys, s.entries) for s in inspection.states} == expected["states"]
    # timers: count, next and last due time, already due, and every timer in the bin its due time falls in
    [timers] = inspection.timers
    stamps = [stamp for domain, stamp in expected["timers"]]
    assert {domain for domain, _ in expected["timers"]} == {"event_time"} and timers.domain == "event_time"
    assert (timers.count, timers.next_due_ms, timers.last_due_ms) == (len(stamps), min(stamps), max(stamps))
    assert timers.due == sum(stamp <= last.watermark for stamp in stamps)
    assert timers.histogram[0][0] == min(stamps) and timers.histogram[-1][1] > max(stamps) and \
        len(timers.histogram) <= 7
    assert [count for _, _, count in timers.histogram] == [
        sum(start <= stamp < end for stamp in stamps) for start, end, _ in timers.histogram]
    # key groups: Spark's key group of each key, as keyedstate computes it in Python
    by_group = Counter(key_group_of_key(key, 7) for key in expected["keys"])
    assert {g.key_group: g.keys for g in inspection.key_groups} == dict(by_group)
    assert sum(g.timers for g in inspection.key_groups) == len(stamps)
    assert sum(count for _, _, count in inspection.key_bytes_histogram) == 13
    # the largest keys, biggest first, with the frame's entries and timers
    largest = inspection.largest_keys
    assert len(largest) == 10 and [k.bytes for k in largest] == sorted((k.bytes for k in largest), reverse=True)
    for key in largest:
        plain = key.key.strip("'")
        assert (key.entries, key.timers) == (expected["keys"][plain]["entries"], expected["keys"][plain]["timers"])
        assert key.key_group == key_group_of_key(plain, 7)


def test_state_bytes_are_the_stored_records_and_the_same_in_both_backends(spark, checkpoints, inspections):
    heap_checkpoint, _ = checkpoints["heap"]
    stored: Counter = Counter()
    for row in read_state_rows(spark, str(heap_checkpoint), 0, None):
        if row is not None:
            for metadata, records in decode_state_payload(StateRow.from_row(row).state):
                stored[metadata["name"]] += sum(len(key) + len(entry) for key, entry in records)
    heap, rocksdb = inspections["heap"], inspections["rocksdb"]
    assert {s.name: s.bytes for s in heap.states} == dict(stored)
    assert heap.state_bytes == sum(stored.values()) == sum(g.state_bytes for g in heap.key_groups)
    assert {s.name: (s.keys, s.entries, s.bytes) for s in rocksdb.states} == \
        {s.name: (s.keys, s.entries, s.bytes) for s in heap.states}
    assert rocksdb.largest_keys == heap.largest_keys


def test_storage_bytes_are_the_rows_and_in_rocksdb_mode_the_versions_files(spark, checkpoints, inspections):
    heap, rocksdb = inspections["heap"], inspections["rocksdb"]
    assert heap.storage.row_bytes > heap.state_bytes and heap.storage.base_bytes is None
    checkpoint, state_storage = checkpoints["rocksdb"]
    records = [VersionRecord.from_bytes(StateRow.from_row(row).state)
               for row in read_state_rows(spark, str(checkpoint), 0, None) if row is not None]
    storage = rocksdb.storage
    assert (storage.base_bytes, storage.changelog_bytes, storage.changelogs) == (
        sum(r.base_bytes for r in records), sum(r.changelog_bytes for r in records),
        sum(len(r.changelogs) for r in records))
    assert storage.changelog_bytes > 0
    [location] = storage.locations
    assert location.startswith(state_storage)
    on_disk = [os.path.join(d, name) for d, _, names in os.walk(location) for name in names]
    assert (storage.stored_files, storage.stored_bytes) == (len(on_disk), sum(map(os.path.getsize, on_disk)))
    assert storage.stored_bytes >= storage.changelog_bytes + storage.base_bytes
    per_group = {g.key_group: g for g in rocksdb.key_groups}
    assert sum(g.changelog_bytes for g in per_group.values()) == storage.changelog_bytes


def test_an_earlier_batch_is_inspected_as_it_was(spark, checkpoints):
    checkpoint, _ = checkpoints["heap"]
    first = read_batches(checkpoint)[0]
    inspection = inspect_keyed_state(spark, str(checkpoint), batch_id=first.batch_id, top_keys=0)
    rows = read_keyed_state_frame(spark, str(checkpoint), batch_id=first.batch_id)
    assert inspection.batch_id == first.batch_id and inspection.largest_keys == ()
    assert inspection.keys == rows.select("key").distinct().count() < 13  # the first batch saw 4 of the 13 users


def test_the_command_prints_the_inspection_and_draws_a_png(spark, checkpoints, inspections, tmp_path, capsys):
    from keyedstate.cli import main

    checkpoint, _ = checkpoints["rocksdb"]
    plot = tmp_path / "state.png"
    assert main(["inspect", str(checkpoint), "--bins", "7", "--top", "3", "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert text == inspections["rocksdb"].describe(top=3) + "\n"
    assert "state backend rocksdb, 7 key groups" in text and "keys: 13 in" in text and "changelogs" in text
    assert plot.read_bytes().startswith(PNG_MAGIC)
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(str(plot)).shape
    assert (height, width) == (900, 1300)


def test_unreadable_checkpoints_fail_with_what_to_do(spark, checkpoints, tmp_path, capsys):
    from keyedstate.cli import main

    checkpoint, _ = checkpoints["heap"]
    last = read_batches(checkpoint)[-1].batch_id
    with pytest.raises(CheckpointNotInspectableError, match=rf"batch {last + 5} .* not committed yet.* 0 to {last}"):
        inspect_keyed_state(spark, str(checkpoint), batch_id=last + 5)
    trimmed = tmp_path / "trimmed"
    shutil.copytree(checkpoint, trimmed)
    (trimmed / "commits" / "0").unlink()
    with pytest.raises(CheckpointNotInspectableError, match=r"batch 0 .* not retained any more"):
        inspect_keyed_state(spark, str(trimmed), batch_id=0)
    shutil.rmtree(trimmed / "state")
    with pytest.raises(CheckpointNotInspectableError, match=r"no state of operator 0 .*not a keyed_process"):
        inspect_keyed_state(spark, str(trimmed))
    for name in os.listdir(trimmed / "commits"):
        (trimmed / "commits" / name).unlink()
    assert main(["inspect", str(trimmed)]) == 1
    assert "CheckpointNotInspectableError" in capsys.readouterr().err and "no committed batch" in \
        str(pytest.raises(CheckpointNotInspectableError, inspect_keyed_state, spark, str(trimmed)).value)
    assert main(["inspect", str(tmp_path / "nowhere")]) == 1
    assert "is not a Spark checkpoint" in capsys.readouterr().err


def test_json_output_options_files_and_a_warning_for_a_secret_typed_as_a_flag(spark, checkpoints, inspections,
                                                                              tmp_path, capsys):
    from keyedstate.cli import main

    checkpoint, state_storage = checkpoints["rocksdb"]
    options = tmp_path / "storage.json"
    options.write_text(json.dumps({"retry_seconds": 5}))
    assert main(["inspect", str(checkpoint), "--state-storage-options-file", str(options), "--json", "--bins", "7",
                 "--checkpoint-option", "secret_key=do-not-show-1234"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == json.loads(json.dumps(inspections["rocksdb"].to_dict()))
    err = captured.err
    assert "--checkpoint-option secret_key=... looks like a secret" in err and "do-not-show-1234" not in err
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", str(checkpoint), "--state-storage-options-file", str(broken)])
    assert exit_.value.code == 2 and "is not valid JSON" in capsys.readouterr().err


def test_python_dash_m_keyedstate_has_the_inspect_command():
    # the command's work is tested in-process above; a second JVM would cost more than it tells
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "keyedstate", "inspect", "--help"], capture_output=True, text=True,
                            env=env, cwd=str(ROOT), timeout=120)
    assert result.returncode == 0, result.stderr
    for option in ("--batch", "--plot", "--properties-file", "--state-storage-options-file", "--master"):
        assert option in result.stdout


def test_timers_after_the_year_9999_are_counted_outside_the_bins(spark):
    from keyedstate.spark.inspection import _timers
    from keyedstate.spark.state_sizes import KEY_SIZES_DDL

    long_max = (1 << 63) - 1
    timers = [[("event_time", 1_000), ("event_time", 1_999), ("event_time", long_max)],
              [("event_time", 2_000), ("processing_time", 5_000)]]
    keys = spark.createDataFrame([(0, f"k{i}", 0, [], [{"domain": d, "timestamp": t} for d, t in of_key])
                                  for i, of_key in enumerate(timers)], KEY_SIZES_DDL)
    event, processing = _timers(keys, 2, 1_999, 4_000)
    assert (event.count, event.next_due_ms, event.last_due_ms, event.due, event.far_future) == (
        4, 1_000, long_max, 2, 1)
    assert event.histogram == ((1_000, 1_501, 1), (1_501, 2_002, 2))
    assert (processing.count, processing.due, processing.far_future, processing.histogram) == (
        1, 0, 0, ((5_000, 5_001, 1),))
