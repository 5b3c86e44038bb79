"""A job's whole life on real Spark, a real broker and a real S3-compatible server: v1 runs, stops with a
savepoint, v2 starts from it with another state backend, state storage, partition count, key-group count and changed
state types; v2 stops with a savepoint and v3 starts from it on another Spark version. The harness is the oracle: the
outputs read_committed consumers see, and the final state, equal one uninterrupted run of the last version over the
same input, every output exactly once."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from pyspark import cloudpickle

import lifecycle_functions
from kafka_helpers import create_topic, read_committed, unique
from keyedstate.spark import keyed_process, stop_with_savepoint
from keyedstate.testing import KeyedProcessHarness
from lifecycle_functions import FAR_TIMER_MS, OUTPUT, ScoreV1, ScoreV2
from tests.short_lived_jvms import short_lived_jvm_environment

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.driver_process]

cloudpickle.register_pickle_by_value(lifecycle_functions)

ROOT = Path(__file__).resolve().parents[2]
COMPAT_PYTHON = ROOT / ".cache" / "compat" / "spark40" / "bin" / "python"
SPARK40_KAFKA_JARS = ROOT / ".cache" / "kafka" / "spark-jars-4.0"
USERS = [f"user-{i}" for i in range(24)]
T0_MS = 1_735_689_600_000  # 2025-01-01


def waves() -> list[list[tuple[str, int, int]]]:
    """Three waves of (user, amount, timestamp ms), one per version; every user appears in every wave, with
    increasing timestamps per user."""
    result, at = [], T0_MS
    for wave in range(3):
        events = []
        for round_ in range(3 + wave):
            for index, user in enumerate(USERS):
                at += 7
                events.append((user, (index * 31 + round_ * 7 + wave) % 50 + 1, at))
        result.append(events)
    return result


def produce_wave(bootstrap: str, topic: str, events) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": "true", "linger.ms": 5})
    for user, amount, at in events:
        producer.produce(topic, key=user.encode(), value=str(amount).encode(), timestamp=at)
    assert producer.flush(60) == 0


def spark40_kafka_jars() -> list[str]:
    if not any(SPARK40_KAFKA_JARS.glob(".complete-*")):
        subprocess.run(["bash", str(ROOT / "scripts" / "kafka.sh"), "fetch-spark"], check=True, timeout=900,
                       env={**os.environ, "SPARK_KAFKA_VERSION": "4.0.5", "SPARK_KAFKA_FALLBACK_VERSION": "4.0.4",
                            "SPARK_KAFKA_JARS_DIR": str(SPARK40_KAFKA_JARS)})
    return sorted(str(jar) for jar in SPARK40_KAFKA_JARS.glob("*.jar"))


def oracle(events):
    """One uninterrupted run of the last version in the harness: its outputs and every key's state."""
    with KeyedProcessHarness(ScoreV2(), key_selector=lambda value: value["user"]) as harness:
        for user, amount, at in events:
            ts = dt.datetime.fromtimestamp(at / 1000, dt.timezone.utc)
            harness.process_element({"user": user, "amount": amount, "ts": ts}, at)
        outputs = [f"{user}:{count}:{total}" for user, count, total in harness.extract_output()]
        state = {user: {name: harness.state(user, descriptor).value()
                        for name, descriptor in _descriptors().items()} for user in USERS}
        assert harness.num_event_time_timers() == len(USERS)
    return outputs, state


def _descriptors():
    from keyedstate import Types, ValueStateDescriptor

    return {"count": ValueStateDescriptor("count", Types.LONG()),
            "profile": ValueStateDescriptor("profile", Types.ROW_NAMED(
                ["total", "last_amount", "last_ts"], [Types.LONG(), Types.LONG(), Types.LONG()])),
            "last_amount_seen": ValueStateDescriptor("last_amount_seen", Types.LONG())}


def run_version(spark, bootstrap, topics, function, checkpoint, *, group, prefix, wave, **keyed):
    """Start a version with the keyedstate-kafka source (group mode) and the exactly-once sink, let it process the
    wave, then stop it with a savepoint."""
    produce_wave(bootstrap, topics["in"], wave)
    source_options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topics["in"], "group.id": group,
                      "startingOffsets": "group", "groupOffsetReset": "earliest"}
    events = (spark.readStream.format("keyedstate-kafka").options(**source_options).load()
              .selectExpr("cast(key as string) as user", "cast(cast(value as string) as bigint) as amount",
                          "timestamp as ts")
              .withWatermark("ts", "0 seconds"))
    scored = keyed_process(events, ["user"], function, OUTPUT, event_time_column="ts", **keyed)
    query = (scored.selectExpr("user as key", "concat_ws(':', user, cast(count as string), cast(total as string)) "
                               "as value")
             .writeStream.format("keyedstate-kafka")
             .options(**{"kafka.bootstrap.servers": bootstrap, "topic": topics["out"], "transactionalIdPrefix": prefix})
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="300 milliseconds").start())
    try:
        query.processAllAvailable()
    except BaseException:
        query.stop()
        raise
    return query, source_options


def test_v1_heap_to_v2_rocksdb_on_s3_to_v3_on_spark_4_0_through_savepoints_exactly_once(
        spark, kafka_broker, s3, tmp_path):
    assert COMPAT_PYTHON.exists(), "the Spark 4.0 compatibility virtualenv is built by `make compat` (make test)"
    jars = spark40_kafka_jars()
    bootstrap = kafka_broker.bootstrap
    # records carry 2025 timestamps: time-based retention would delete them at once
    topics = {name: create_topic(bootstrap, 2, config={"retention.ms": "-1"}) for name in ("in", "out")}
    group = unique("lifecycle")
    all_waves = waves()
    storage_options = s3.storage_options()
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        # v1: heap, 2 shuffle partitions, 8 key groups
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        v1 = run_version(spark, bootstrap, topics, ScoreV1(), tmp_path / "v1-checkpoint", group=group,
                         prefix=unique("v1"), wave=all_waves[0], num_key_groups=8)
        first = stop_with_savepoint(v1[0], str(tmp_path / "savepoint-1"), kafka_source_options=v1[1],
                                    num_key_groups=16, state_backend="rocksdb")

        # v2: RocksDB with state on S3, 4 partitions, 16 key groups, count widened, a ROW field and a state added
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        v2 = run_version(spark, bootstrap, topics, ScoreV2(), tmp_path / "v2-checkpoint", group=group,
                         prefix=unique("v2"), wave=all_waves[1], num_key_groups=16, state_backend="rocksdb",
                         state_storage=f"s3://{s3.bucket}/state", state_storage_options=storage_options,
                         state_local_dir=str(tmp_path / "v2-local"), initial_state=first)
        assert (first.state_backend, first.num_key_groups) == ("rocksdb", 16)
        second = stop_with_savepoint(v2[0], str(tmp_path / "savepoint-2"), kafka_source_options=v2[1],
                                     initial_state=first, state_storage=f"s3://{s3.bucket}/state",
                                     state_storage_options=storage_options)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)

    assert list((s3.data_dir / s3.bucket / "state").rglob("*.sst"))  # v2 kept its state on S3
    assert second.batch_id is not None and second.records > 0

    # v3: v2's code on PySpark 4.0, Spark's own Kafka source from the savepoint's offsets and Spark's own sink
    produce_wave(bootstrap, topics["in"], all_waves[2])
    config = {"bootstrap": bootstrap, "in_topic": topics["in"], "out_topic": topics["out"], "jars": jars,
              "savepoint": second.path, "starting_offsets": second.source_offsets[0],
              "checkpoint": str(tmp_path / "v3-checkpoint"), "num_key_groups": 16,
              "state_local_dir": str(tmp_path / "v3-local"), "state_json": str(tmp_path / "v3-state.json")}
    (tmp_path / "v3.json").write_text(json.dumps(config))
    environment = short_lived_jvm_environment(PYSPARK_PYTHON=str(COMPAT_PYTHON),
                                              PYSPARK_DRIVER_PYTHON=str(COMPAT_PYTHON), PYTHONPATH=str(ROOT))
    v3 = subprocess.run([str(COMPAT_PYTHON), str(Path(__file__).with_name("lifecycle_job.py")),
                         str(tmp_path / "v3.json")], env=environment, capture_output=True, text=True, timeout=600)
    assert v3.returncode == 0, v3.stderr[-4000:]

    outputs, state = oracle([event for wave in all_waves for event in wave])
    seen = [value.decode() for _, _, value, _ in read_committed(bootstrap, topics["out"])]
    assert Counter(seen) == Counter(outputs)  # every output exactly once across both switches
    v3_run = json.loads((tmp_path / "v3-state.json").read_text())
    assert v3_run["spark_version"].startswith("4.0.")
    final = v3_run["state"]
    assert set(final) == set(USERS)
    for user in USERS:
        assert final[user]["count"] == state[user]["count"]
        assert final[user]["profile"] == list(state[user]["profile"])
        assert final[user]["last_amount_seen"] == state[user]["last_amount_seen"]
        assert final[user]["__timers__"] == [["event_time", FAR_TIMER_MS]]
