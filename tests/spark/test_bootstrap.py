"""bootstrap_keyed_state on Spark: 100,000 keys bootstrapped from a DataFrame, then a query on new events gives the
output of one query that saw the bootstrap's events first, also across a restart, in both state backends; and the
refusals the driver and the first batch give."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from keyedstate import (
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeyedStateBootstrapFunction,
    Types,
    ValueStateDescriptor,
)
from keyedstate.errors import ConfigurationError
from keyedstate.spark import KeyedStateBootstrap, bootstrap_keyed_state, keyed_co_process, keyed_process
from tests.spark.file_stream import start_query, wait_until, write_input

pytestmark = [pytest.mark.spark]

SCHEMA = "user STRING, amount BIGINT, emit BOOLEAN, ts TIMESTAMP"
OUTPUT = "user STRING, kind STRING, count BIGINT, total BIGINT, at BIGINT"
T0 = 1_704_067_200_000
KEYS = 100_000
KEY_GROUPS = 16
QUIET_MS = 60_000
FLUSHED_TIMERS = T0 + 190_000  # the timers of new_events(1) and (2): only the flush event makes them due


class Tally:
    """The state both functions keep per key: count and total of the amounts, the last event time, and a timer a
    minute after it."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.LONG()))
        self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.LONG()))

    def add(self, value, timestamp, ctx) -> tuple[int, int]:
        count, total = (self.count.value() or 0) + 1, (self.total.value() or 0) + value["amount"]
        self.count.update(count)
        self.total.update(total)
        self.last.update(timestamp)
        ctx.timer_service().register_event_time_timer(timestamp + QUIET_MS)
        return count, total


class TallyFunction(Tally, KeyedProcessFunction):
    def process_element(self, value, ctx):
        count, total = self.add(value, ctx.timestamp(), ctx)
        if value["emit"]:
            yield ctx.get_current_key(), "element", count, total, ctx.timestamp()

    def on_timer(self, timestamp, ctx):
        if timestamp == self.last.value() + QUIET_MS:
            yield ctx.get_current_key(), "quiet", self.count.value(), self.total.value(), timestamp


class TallySeed(Tally, KeyedStateBootstrapFunction):
    def process_element(self, value, ctx):
        self.add(value, value["ts_ms"], ctx)


class CoTally(Tally, KeyedCoProcessFunction):
    def process_element1(self, value, ctx):
        return ()

    def process_element2(self, value, ctx):
        return ()


def history_frame(spark, directory: Path, keys: int):
    write_input(directory, 0, history(keys))
    return spark.read.schema(SCHEMA).json(str(directory)).withColumn("ts_ms", F.unix_millis("ts"))


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def history(keys: int) -> list[dict]:
    # within 50 s: the timers they register (a minute later) are not due when the new events start
    return [{"user": f"u{i}", "amount": i % 7, "emit": False, "ts": iso(T0 + (i % 50) * 1_000)} for i in range(keys)]


def new_events(batch: int, keys: int) -> list[dict]:
    """Batch 0..2: 3,000 events over the keys (every key group gets some in batch 0); batch 3, a key of its own,
    moves the watermark past every timer of the others."""
    if batch == 3:
        return [{"user": "flush", "amount": 0, "emit": True, "ts": iso(T0 + 10**9)}]
    return [{"user": f"u{(i * 7919 + batch * 104_729) % keys}", "amount": i % 5, "emit": True,
             "ts": iso(T0 + 100_000 + batch * 30_000 + i * 5)} for i in range(3_000)]


def run(spark, base: Path, files: list[list[dict]], first_index: int = 0, flushed: bool = False, **kwargs):
    """Run the query over ``files``; with ``flushed``, until the timers the flush event makes due have fired."""
    (base / "in").mkdir(parents=True, exist_ok=True)
    query = start_query(spark, base, TallyFunction(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
                        num_key_groups=KEY_GROUPS, sink_path=base / "out", **kwargs)
    try:
        for index, rows in enumerate(files, start=first_index):
            write_input(base / "in", index, rows)
            query.processAllAvailable()
        if flushed:  # they fire in the batch after the flush event's (one commit): wait for it, whatever the timing
            wait_until(lambda: any(kind == "quiet" and at >= FLUSHED_TIMERS for _, kind, _, _, at in output_of(
                spark, base)), 180, "the timers of the new events")
    finally:
        query.stop()


def output_of(spark, base: Path) -> list[tuple]:
    return sorted(tuple(row) for row in spark.read.schema(OUTPUT).json(str(base / "out")).collect())


def backend_arguments(backend: str, base: Path) -> dict:
    if backend == "heap":
        return {"state_backend": "heap"}
    return {"state_backend": "rocksdb", "state_storage": str(base / "state-storage"),
            "state_local_dir": str(base / "local")}


@pytest.fixture(scope="module")
def one_query(spark, tmp_path_factory):
    """The oracle: one query that reads the bootstrap's events as its first batch, then the new events."""
    base = tmp_path_factory.mktemp("one-query")
    run(spark, base, [history(KEYS)] + [new_events(batch, KEYS) for batch in range(4)], flushed=True)
    return output_of(spark, base)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_bootstrapped_query_gives_the_output_of_one_query_that_saw_the_bootstrap_first(spark, tmp_path, backend,
                                                                                        one_query):
    frame = history_frame(spark, tmp_path / "history", KEYS)
    boot = bootstrap_keyed_state(frame, ["user"], TallySeed(), path=str(tmp_path / "bootstrap"),
                                 num_key_groups=KEY_GROUPS, state_backend=backend,
                                 **({"state_local_dir": str(tmp_path / "local")} if backend == "rocksdb" else {}))
    assert (boot.key_groups_with_state, boot.state_backend) == (KEY_GROUPS, backend)
    bootstrap_files = sorted(p for p in (tmp_path / "bootstrap").rglob("*") if p.is_file())
    arguments = {**backend_arguments(backend, tmp_path), "initial_state": str(tmp_path / "bootstrap")}
    run(spark, tmp_path, [new_events(batch, KEYS) for batch in range(2)], **arguments)
    run(spark, tmp_path, [new_events(batch, KEYS) for batch in range(2, 4)], first_index=2, flushed=True,
        **arguments)  # a restart from the checkpoint
    output = output_of(spark, tmp_path)
    assert len({user for user, kind, *_ in output if kind == "quiet"}) == KEYS  # every key's state reached its timer
    assert output == one_query
    # the query read the bootstrap and wrote its own storage: the bootstrap's files are all still there
    assert sorted(p for p in (tmp_path / "bootstrap").rglob("*") if p.is_file()) == bootstrap_files


@pytest.fixture(scope="module")
def small_bootstrap(spark, tmp_path_factory) -> KeyedStateBootstrap:
    base = tmp_path_factory.mktemp("small-bootstrap")
    frame = history_frame(spark, base / "history", 20)
    return bootstrap_keyed_state(frame, ["user"], TallySeed(), path=str(base / "bootstrap"), num_key_groups=4)


@pytest.mark.parametrize("first_run_bootstrapped", [False, True], ids=["added-later", "dropped-later"])
def test_a_restart_that_adds_or_drops_the_initial_state_is_refused_before_it_commits(spark, tmp_path,
                                                                                     small_bootstrap,
                                                                                     first_run_bootstrapped):
    (tmp_path / "in").mkdir()
    bootstrapped = {"initial_state": small_bootstrap}
    runs = [bootstrapped, {}] if first_run_bootstrapped else [{}, bootstrapped]
    query = start_query(spark, tmp_path, TallyFunction(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
                        num_key_groups=4, sink_path=tmp_path / "out", **runs[0])
    try:
        write_input(tmp_path / "in", 0, new_events(0, 2))  # a few users: most key groups hold only the seed, if any
        query.processAllAvailable()
    finally:
        query.stop()
    commits = sorted((tmp_path / "checkpoint" / "commits").iterdir())
    query = start_query(spark, tmp_path, TallyFunction(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
                        num_key_groups=4, sink_path=tmp_path / "out", **runs[1])
    try:
        write_input(tmp_path / "in", 1, new_events(1, 20))
        with pytest.raises(StreamingQueryException) as failure:
            query.processAllAvailable()
    finally:
        query.stop()
    message = str(failure.value)
    if first_run_bootstrapped:
        assert f"written with initial_state of bootstrap {small_bootstrap.bootstrap_id!r}, but it now runs with no " \
               f"initial_state" in message and "Pass the same initial_state on every restart" in message
    else:
        assert "already holds state" in message and "Use a new checkpoint location" in message
    assert sorted((tmp_path / "checkpoint" / "commits").iterdir()) == commits


def test_the_driver_refuses_a_bootstrap_that_does_not_fit_the_query(spark, tmp_path, small_bootstrap):
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path)).withWatermark("ts", "0 seconds")
    define = dict(event_time_column="ts", initial_state=small_bootstrap)
    with pytest.raises(ConfigurationError, match="bootstrapped with num_key_groups=4 but keyed_process runs with "
                                                 "num_key_groups=8"):
        keyed_process(stream, ["user"], TallyFunction(), OUTPUT, num_key_groups=8, **define)
    with pytest.raises(ConfigurationError, match="bootstrapped with state_backend='heap' but keyed_process runs "
                                                 "with state_backend='rocksdb'"):
        keyed_process(stream, ["user"], TallyFunction(), OUTPUT, num_key_groups=4, state_backend="rocksdb",
                      state_storage=str(tmp_path / "storage"), **define)
    with pytest.raises(ConfigurationError, match="key columns of types \\(string\\) but the query's key columns "
                                                 "have types \\(bigint\\)"):
        keyed_process(stream, ["amount"], TallyFunction(), OUTPUT, num_key_groups=4, **define)
    with pytest.raises(ConfigurationError, match="bootstrapped with num_key_groups=4 but keyed_co_process runs"):
        keyed_co_process(stream, stream, ["user"], ["user"], CoTally(), OUTPUT,
                         event_time_columns=("ts", "ts"), num_key_groups=8, initial_state=small_bootstrap)


def test_bootstrap_keyed_state_refuses_what_it_cannot_write(spark, tmp_path, small_bootstrap):
    frame = spark.read.schema(SCHEMA).json(str(Path(small_bootstrap.path).parent / "history"))  # ts_ms unused
    with pytest.raises(ConfigurationError,
                       match="already holds a savepoint or bootstrap \\([0-9a-f]+, .*Write to a new path"):
        bootstrap_keyed_state(frame, ["user"], TallySeed(), path=small_bootstrap.path, num_key_groups=4)
    with pytest.raises(ConfigurationError, match="reads a batch DataFrame"):
        bootstrap_keyed_state(spark.readStream.schema(SCHEMA).json(str(tmp_path)), ["user"], TallySeed(),
                              path=str(tmp_path / "b"))
    with pytest.raises(ConfigurationError, match="must be a KeyedStateBootstrapFunction instance, got TallyFunction"):
        bootstrap_keyed_state(frame, ["user"], TallyFunction(), path=str(tmp_path / "b"))


def test_bootstrapped_timers_of_a_key_group_fire_only_once_spark_calls_the_group(spark, tmp_path, small_bootstrap):
    """Pins a difference from Flink (docs/differences-from-flink.md, "Bootstrapped timers"): Spark calls a key group
    only for its input or its own timeout, so a bootstrapped timer waits for its key group's first call even when the
    watermark has passed it; then it fires."""
    from keyedstate.keygroups import key_group_of_columns

    group_of = {f"u{i}": key_group_of_columns([f"u{i}"], ["string"], 4) for i in range(20)}
    woken = "u0"
    same_group = {user for user, group in group_of.items() if group == group_of[woken] and user != woken}
    asleep = sorted(user for user, group in group_of.items() if group != group_of[woken])
    assert same_group and asleep

    def quiet_users() -> set:
        return {user for user, kind, *_ in output_of(spark, tmp_path) if kind == "quiet"}

    (tmp_path / "in").mkdir()
    query = start_query(spark, tmp_path, TallyFunction(), schema=SCHEMA, key_columns=["user"], output_schema=OUTPUT,
                        num_key_groups=4, sink_path=tmp_path / "out", initial_state=small_bootstrap)
    try:
        # one event, far past every bootstrapped timer: the watermark passes them all, but only u0's group is called
        write_input(tmp_path / "in", 0, [{"user": woken, "amount": 1, "emit": False, "ts": iso(T0 + 10**9)}])
        query.processAllAvailable()
        wait_until(lambda: same_group <= quiet_users(), 120, "the timers of the called key group")
        assert quiet_users() == same_group  # the other key groups' timers are due too, and wait

        write_input(tmp_path / "in", 1, [{"user": asleep[0], "amount": 1, "emit": False, "ts": iso(T0 + 10**9)}])
        query.processAllAvailable()
        # the watermark is past already when this group is first called: its due timers fire before the element,
        # the new key's own included
        woken_group = {user for user in asleep if group_of[user] == group_of[asleep[0]]}
        assert len(woken_group) > 1
        wait_until(lambda: woken_group <= quiet_users(), 120, "the timers of the key group called next")
        assert quiet_users() == same_group | woken_group
    finally:
        query.stop()
