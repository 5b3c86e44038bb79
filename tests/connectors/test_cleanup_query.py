"""Cleaning up after a stopped query, end to end: a RocksDB-mode query with its state on S3 (S3Proxy) writes through
the exactly-once sink to a real broker; ``clean_up_query`` and ``python -m keyedstate cleanup`` refuse while it runs
and while its checkpoint still holds the state, list what it left (state files with sizes, one progress-marker group
per write partition), and remove it all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from connectors.kafka import FORMAT_NAME
from connectors.kafka.progress_groups import find_progress_groups
from kafka_helpers import create_topic, produce, read_committed, unique
from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.cleanup import clean_up_query
from keyedstate.errors import CleanupRefusedError
from keyedstate.spark import keyed_process

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value["user"], f"{value['user']}:{count}"


@pytest.fixture(autouse=True, scope="module")
def functions_of_this_module_are_pickled_by_value(request):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "keyedstate", "cleanup", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


def _objects_below(s3, prefix: str) -> list[Path]:
    return [p for p in (s3.data_dir / s3.bucket / prefix).rglob("*") if p.is_file()] \
        if (s3.data_dir / s3.bucket / prefix).exists() else []


def test_a_stopped_rocksdb_query_with_an_exactly_once_sink_is_cleaned_up_completely(spark, kafka_broker, s3,
                                                                                        tmp_path):
    bs = kafka_broker.bootstrap
    source, out = create_topic(bs, 2), create_topic(bs, 2)
    produce(bs, source, 200, 2)
    prefix = unique("alerts")
    storage, local, checkpoint = f"s3://{s3.bucket}/jobs/state", tmp_path / "local", tmp_path / "checkpoint"
    options = s3.storage_options()
    events = (spark.readStream.format(FORMAT_NAME)
              .options(**{"kafka.bootstrap.servers": bs, "subscribe": source, "startingOffsets": "earliest",
                          "commitOffsets": "false", "maxOffsetsPerTrigger": "100"}).load()
              .selectExpr("cast(key as string) as user", "cast(value as string) as payload", "timestamp as ts")
              .withWatermark("ts", "0 seconds"))
    # event time: in processing-time mode Spark runs batches without data forever and processAllAvailable never ends
    counted = keyed_process(events, ["user"], RunningCount(), "key STRING, value STRING", event_time_column="ts",
                            state_backend="rocksdb", state_storage=storage, state_storage_options=options,
                            state_local_dir=str(local), num_key_groups=8)
    query = (counted.writeStream.format(FORMAT_NAME)
             .options(**{"kafka.bootstrap.servers": bs, "topic": out, "transactionalIdPrefix": prefix})
             .option("checkpointLocation", str(checkpoint)).start())
    query_id = query.id
    cleanup = {"state_storage": storage, "state_storage_options": options, "state_local_dir": str(local),
               "bootstrap_servers": bs}
    cli_storage = [f"--state-storage-option={key}={value}" for key, value in options.items()]
    cli = [str(checkpoint), "--state-storage", storage, *cli_storage, "--state-local-dir", str(local),
           "--bootstrap-servers", bs]
    try:
        query.processAllAvailable()
        assert len(read_committed(bs, out)) == 200

        # running: refused in this process (its Spark session runs the query) and from another one (recent batches)
        with pytest.raises(CleanupRefusedError, match=f"query {query_id} is running in this process"):
            clean_up_query(checkpoint, dry_run=False, **cleanup)
        running = _cli(*cli)
        assert running.returncode == 3, running.stderr
        assert "refused" in running.stderr and "may still be running" in running.stderr
    finally:
        query.stop()
    groups = [f"{prefix}-{query_id}-{partition}" for partition in (0, 1)]
    assert [group.group_id for group in find_progress_groups(bs, query_id)] == groups
    assert _objects_below(s3, f"jobs/state/{query_id}")

    # stopped, dry run: lists the state (with sizes) and both groups, removes nothing, says why a real run refuses
    report = clean_up_query(checkpoint, **cleanup)
    [state] = report.of_kind("state storage")
    assert state.location == f"{storage}/{query_id}" and state.files > 0 and state.size_bytes > 0
    assert [item.location for item in report.of_kind("consumer group")] == groups
    assert [item.location for item in report.of_kind("local databases")] == [str(local / query_id)]
    assert any("still holds state rows" in reason for reason in report.refusals)
    assert any("would need the sink's progress-marker groups" in reason for reason in report.refusals)
    assert _objects_below(s3, f"jobs/state/{query_id}") and find_progress_groups(bs, query_id)

    dry = _cli(*cli, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would remove" in dry.stdout and f"{storage}/{query_id}" in dry.stdout
    assert all(group in dry.stdout for group in groups)
    assert "still holds state rows" in dry.stdout

    # the checkpoint still names the state: refused, unless forced
    with pytest.raises(CleanupRefusedError, match="still holds state rows"):
        clean_up_query(checkpoint, dry_run=False, idle_seconds=0, **cleanup)
    assert _objects_below(s3, f"jobs/state/{query_id}")
    removed = clean_up_query(checkpoint, dry_run=False, force=True, **cleanup)
    assert {item.kind for item in removed.items} == {"state storage", "local databases", "consumer group"}
    assert _objects_below(s3, f"jobs/state/{query_id}") == []
    assert find_progress_groups(bs, query_id) == []
    assert not (local / query_id).exists()
    assert checkpoint.exists()

    # the checkpoint itself, through the command line, now that nothing else is left
    done = _cli(*cli, "--delete-checkpoint", "--idle-seconds", "0")
    assert done.returncode == 0, done.stderr
    assert "removed" in done.stdout and str(checkpoint) in done.stdout
    assert not checkpoint.exists()
    assert len(read_committed(bs, out)) == 200  # the sink's output stays
