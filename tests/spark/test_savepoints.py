"""Savepoints on Spark: a query stopped with a savepoint continues in a new query (new checkpoint) with another
state backend and number of key groups, twice (heap, 4 key groups -> RocksDB, 8 -> heap, 4), and the three runs
together give the harness's output over the same batches: every key continues its count, list and map, pending
timers fire, TTL timestamps are kept. Also: a savepoint of a running query holds only committed batches, a damaged
row file fails the key group's load naming it, an interrupted write is refused, and a savepoint re-written from a
savepoint on S3."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from pathlib import Path

import pytest

from keyedstate import (
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    Types,
    ValueStateDescriptor,
)
from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import key_group_of_key
from keyedstate.spark import Savepoint, read_savepoint, stop_with_savepoint, write_savepoint
from keyedstate.spark.savepoint_records import SourceDecoder, decode_chunk
from keyedstate.spark.state_reader import decode_state_row
from keyedstate.state.key_groups.initial_state import InitialState, read_bootstrap_manifest
from tests.spark.file_stream import read_batches, replay_in_harness, start_query, write_input

pytestmark = [pytest.mark.spark]

T0 = 1_704_067_200_000
SCHEMA = "user STRING, payload STRING, ts TIMESTAMP"
OUTPUT = "user STRING, count BIGINT, payloads STRING, kinds STRING"
USERS = 12
# one user per key group of 8 (so of 4 too): every key group gets input in every batch, and Spark calls a key group
# of a new query only for its input (docs/differences-from-flink.md); these users never go quiet
HEARTBEATS = sorted({key_group_of_key(f"h{i}", 8, types=["string"]): f"h{i}" for i in range(200)}.values())
assert len(HEARTBEATS) == 8


class Tally(KeyedProcessFunction):
    """Value (with TTL), list and map state per key and a timer 40 s after the key's last element; the timer emits
    and clears the key."""

    def open(self, runtime_context):
        count = ValueStateDescriptor("count", Types.LONG())
        count.enable_time_to_live(StateTtlConfig.new_builder(10**12).build())
        self.count = runtime_context.get_state(count)
        self.payloads = runtime_context.get_list_state(ListStateDescriptor("payloads", Types.STRING()))
        self.kinds = runtime_context.get_map_state(MapStateDescriptor("kinds", Types.STRING(), Types.LONG()))
        self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.payloads.add(value["payload"])
        self.kinds.put(value["payload"][0], (self.kinds.get(value["payload"][0]) or 0) + 1)
        self.last.update(ctx.timestamp())
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 40_000)
        return ()

    def on_timer(self, timestamp, ctx):
        if timestamp == self.last.value() + 40_000:
            kinds = ",".join(f"{k}={v}" for k, v in sorted(self.kinds.items()))
            yield ctx.get_current_key(), self.count.value(), "|".join(self.payloads.get()), kinds
            self.count.clear()
            self.payloads.clear()
            self.kinds.clear()


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def batch_rows(index: int) -> list[dict]:
    """Three of twelve users per batch (the others go quiet: their timers fire a few batches later) and the
    heartbeat users."""
    users = [f"u{(index * 5 + i) % USERS}" for i in range(3)]
    rows = [{"user": user, "payload": f"{'abc'[(index + i) % 3]}{index}-{i}", "ts": iso(T0 + index * 20_000 + i * 700)}
            for i, user in enumerate(users * 2)]
    return rows + [{"user": h, "payload": f"h{index}", "ts": iso(T0 + index * 20_000)} for h in HEARTBEATS]


def run(spark, base: Path, batches: range, *, stop=None, **options):
    """Run ``batches`` (input files ``batches``) on ``base``'s checkpoint; ``stop(query)`` ends it (default stop)."""
    (base / "in").mkdir(parents=True, exist_ok=True)
    query = start_query(spark, base, Tally(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
                        sink_path=base / "out", **options)
    try:
        for index in batches:
            write_input(base / "in", index, batch_rows(index))
            query.processAllAvailable()
        return stop(query) if stop is not None else None
    finally:
        query.stop()


def output_of(spark, base: Path) -> list[tuple]:
    if not (base / "out").exists():
        return []
    return [tuple(row) for row in spark.read.schema(OUTPUT).json(str(base / "out")).collect()]


def expected_output(runs: list[tuple[Path, int, "int | None"]]) -> list[tuple]:
    """The harness over every run's batches in order; a run started from a savepoint runs with the watermark
    floor of the savepoint (``keyedstate`` continues the old query's watermark)."""
    batches, inputs = [], []
    offset = 0
    for base, first_file, floor in runs:
        for batch in read_batches(base / "checkpoint"):
            batch.watermark = max(batch.watermark, floor or 0)
            batch.files = [offset + index for index in batch.files]
            batches.append(batch)
        count = max((index for b in read_batches(base / "checkpoint") for index in b.files), default=-1) + 1
        inputs += [batch_rows(first_file + index) for index in range(count)]
        offset += count
    return replay_in_harness(Tally(), lambda value: value["user"], batches, inputs,
                             to_value=lambda row: {"user": row["user"], "payload": row["payload"]},
                             timestamp_of=lambda row: int(dt.datetime.fromisoformat(row["ts"]).timestamp() * 1000),
                             key_of=lambda row: row["user"])


def rows_of(savepoint: Savepoint) -> InitialState:
    body = read_bootstrap_manifest(savepoint.path, savepoint.storage_options)
    return InitialState(savepoint.path, savepoint.bootstrap_id,
                        {int(k): FileEntry.from_json(v) for k, v in body["rows"].items()}, savepoint.storage_options)


def savepoint_state(savepoint: Savepoint) -> dict:
    """Every key's state and timers in a savepoint, decoded on the driver (small test state)."""
    initial = rows_of(savepoint)
    state: dict = {}
    for key_group in initial.rows:
        state.update(decode_state_row(initial.row(key_group), (), savepoint.path, savepoint.storage_options))
    return state


def raw_entries(savepoint: Savepoint, state: str) -> dict[bytes, bytes]:
    """The stored entries (TTL timestamp included) of ``state`` by stored key without the key group, read by the
    savepoint writer's own decoder."""
    import pandas as pd

    initial = rows_of(savepoint)
    frame = pd.DataFrame({"key_group": list(initial.rows),
                          "entry": [json.dumps(e.to_json()) for e in initial.rows.values()]})
    decoder = SourceDecoder("files", (savepoint.key_columns[0][1],), savepoint.num_key_groups, 1, savepoint.path,
                            savepoint.storage_options, None)
    entries: dict[bytes, bytes] = {}
    for out in decoder(iter([frame])):
        for chunk in out["chunk"]:
            states, _ = decode_chunk(chunk)
            for metadata, flat in states:
                if metadata["name"] == state:
                    entries.update(zip(flat[0::2], flat[1::2]))
    return entries


def rocksdb(base: Path) -> dict:
    return {"state_backend": "rocksdb", "state_storage": str(base / "state-storage"),
            "state_local_dir": str(base / "local")}


def last_batch(base: Path) -> int:
    return max(int(p.name) for p in (base / "checkpoint" / "commits").iterdir() if p.name.isdigit())


def floor_of(savepoint: Savepoint) -> int:
    body = read_bootstrap_manifest(savepoint.path, savepoint.storage_options)
    return int(body["savepoint"]["next_batch_watermark_ms"])


@pytest.fixture(scope="module")
def lifecycle(spark, tmp_path_factory):
    """v1 (heap, 4 key groups, batches 0-2) -> stop_with_savepoint for RocksDB with 8 -> v2 (batches 3-4) ->
    stop_with_savepoint for heap with 4 -> v3 (batches 5-6), whose savepoint is written while it runs."""
    tmp = tmp_path_factory.mktemp("savepoints")
    # batches with data only: half the batches (timers fire at the next batch with data, which every batch is)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    try:
        return _lifecycle(spark, tmp)
    finally:
        spark.conf.unset("spark.sql.streaming.noDataMicroBatches.enabled")


def _lifecycle(spark, tmp: Path) -> dict:
    one, two, three = tmp / "v1", tmp / "v2", tmp / "v3"
    heap_storage = {"state_storage": str(tmp / "heap-storage")}
    first = run(spark, one, range(0, 3), num_key_groups=4, **heap_storage, stop=lambda query: stop_with_savepoint(
        query, str(tmp / "sp1"), num_key_groups=8, state_backend="rocksdb", **heap_storage))
    second = run(spark, two, range(3, 5), num_key_groups=8, initial_state=first, **rocksdb(two),
                 stop=lambda query: stop_with_savepoint(query, str(tmp / "sp2"), num_key_groups=4,
                                                        state_backend="heap", initial_state=first,
                                                        state_storage=str(two / "state-storage")))

    def savepoint_while_running(query):
        assert query.isActive
        return query.isActive, write_savepoint(spark, str(three / "checkpoint"), str(tmp / "sp3"),
                                               initial_state=second, **heap_storage)

    was_running, third = run(spark, three, range(5, 7), num_key_groups=4, initial_state=second.path,
                             stop=savepoint_while_running, **heap_storage)
    return {"tmp": tmp, "runs": (one, two, three), "savepoints": (first, second, third), "was_running": was_running}


def test_stop_change_backend_and_key_groups_resume_twice_equals_the_harness(spark, lifecycle):
    one, two, three = lifecycle["runs"]
    first, second, third = lifecycle["savepoints"]
    assert (first.batch_id, first.num_key_groups, first.state_backend) == (last_batch(one), 8, "rocksdb")
    assert (second.batch_id, second.num_key_groups, second.state_backend) == (last_batch(two), 4, "heap")
    assert first.timers > 0 and first.records > 0 and first.size_bytes > 0 and first.uid == "Tally"
    assert read_savepoint(first.path) == first
    assert any(p.name.startswith("kg-") and p.is_dir() for p in Path(first.path).iterdir())  # RocksDB base files

    expected = expected_output([(one, 0, None), (two, 3, floor_of(first)), (three, 5, floor_of(second))])
    assert sorted(output_of(spark, one) + output_of(spark, two) + output_of(spark, three)) == sorted(expected)
    assert len(expected) >= 6  # quiet users' timers fired, before and after both switches

    # the savepoint of the running v3: its last committed batch, every key (heartbeats counted every batch)
    assert lifecycle["was_running"] and third.batch_id == last_batch(three)
    state = savepoint_state(third)
    for user in HEARTBEATS:
        assert state[user]["count"] == 7 and state[user]["payloads"] == [f"h{i}" for i in range(7)]
        assert state[user]["__timers__"][-1] == ("event_time", T0 + 6 * 20_000 + 40_000)


def test_a_savepoint_is_rewritten_on_s3_with_ttl_timestamps_and_timers_kept(spark, lifecycle, s3):
    first = lifecycle["savepoints"][0]
    options = s3.storage_options()
    moved = write_savepoint(spark, first, f"s3://{s3.bucket}/savepoints/sp1-heap", num_key_groups=2,
                            state_backend="heap", savepoint_storage_options=options)
    assert (moved.batch_id, moved.query_id, moved.num_key_groups, moved.state_backend) == \
        (first.batch_id, first.query_id, 2, "heap")
    assert (moved.records, moved.timers) == (first.records, first.timers)
    assert savepoint_state(moved) == savepoint_state(first)
    ttl = raw_entries(first, "count")
    assert ttl and raw_entries(moved, "count") == ttl  # entries, TTL timestamps included, byte for byte
    written_at = {int.from_bytes(entry[:8], "big") for entry in ttl.values()}  # v1's batch timestamps
    now_ms = int(time.time() * 1000)
    assert all(now_ms - 3_600_000 < at <= now_ms for at in written_at)


def test_a_savepoint_that_does_not_fit_the_query_is_refused_at_keyed_process_naming_the_rewrite(spark, lifecycle,
                                                                                               tmp_path):
    from keyedstate.spark import keyed_process

    first = lifecycle["savepoints"][0]  # RocksDB, 8 key groups
    events = spark.readStream.schema(SCHEMA).json(str(tmp_path)).withWatermark("ts", "0 seconds")
    with pytest.raises(ConfigurationError, match=r"is a savepoint written for num_key_groups=8 but keyed_process runs "
                                                 r"with num_key_groups=4; .*write_savepoint\(spark, .*sp1', "
                                                 r"<new path>, num_key_groups=4\)"):
        keyed_process(events, ["user"], Tally(), OUTPUT, event_time_column="ts", num_key_groups=4,
                      initial_state=first, **rocksdb(tmp_path))
    with pytest.raises(ConfigurationError, match=r"savepoint written for state_backend='rocksdb' but keyed_process "
                                                 r"runs with state_backend='heap'; .*state_backend='heap'\)"):
        keyed_process(events, ["user"], Tally(), OUTPUT, event_time_column="ts", num_key_groups=8,
                      initial_state=first.path, state_storage=str(tmp_path / "storage"))


def test_a_damaged_row_file_fails_its_key_groups_load_and_an_interrupted_write_is_refused(spark, lifecycle,
                                                                                          tmp_path):
    from keyedstate.errors import SnapshotCorruptedError
    from keyedstate.spark import keyed_process
    from keyedstate.state.key_groups.initial_state import resolve_initial_state

    second = lifecycle["savepoints"][1]  # heap, 4 key groups
    copy = tmp_path / "copy"
    shutil.copytree(second.path, copy)
    initial = resolve_initial_state(str(copy), state_backend="heap", num_key_groups=4, key_types=["string"],
                                    storage_options=None)
    key_group, entry = sorted(initial.rows.items())[0]
    damaged = copy / entry.path
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptedError, match=rf"{entry.path}.*key group {key_group}.*is corrupt"):
        initial.row(key_group)  # what the key group's first call in a query runs

    (copy / "_bootstrap.json").unlink()  # as a write_savepoint interrupted before its commit leaves it
    events = spark.readStream.schema(SCHEMA).json(str(tmp_path)).withWatermark("ts", "0 seconds")
    with pytest.raises(ConfigurationError, match="holds no bootstrap or savepoint .*interrupted writes no "
                                                 "_bootstrap.json"):
        keyed_process(events, ["user"], Tally(), OUTPUT, event_time_column="ts", num_key_groups=4,
                      initial_state=str(copy), state_storage=str(tmp_path / "storage"))
    with pytest.raises(ConfigurationError, match="holds no savepoint: _bootstrap.json is missing"):
        read_savepoint(str(copy))
    with pytest.raises(ConfigurationError, match="already holds a savepoint or bootstrap"):
        write_savepoint(spark, second, second.path)
