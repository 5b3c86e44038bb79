"""Stop with savepoint between two queries that read with the keyedstate-kafka source in consumer-group mode and write
through the exactly-once sink: the savepoint's batch is the one whose end offsets the group has committed, the new
query (new checkpoint, batch ids from 0 again, other backend and key groups) resumes at the next record, and a
``read_committed`` consumer sees every output exactly once, with every user's count continuing across the switch."""

from __future__ import annotations

from collections import Counter

import pytest

from connectors.kafka import FORMAT_NAME
from kafka_helpers import committed_offsets, create_topic, produce, read_committed, unique
from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor
from keyedstate.spark import keyed_process, stop_with_savepoint

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

USERS = 7


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value["user"], f"{value['user']}:{value['payload']}:{count}"


@pytest.fixture(autouse=True, scope="module")
def functions_of_this_module_are_pickled_by_value(request):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


def start(spark, source_options, sink_options, checkpoint, **keyed):
    events = (spark.readStream.format(FORMAT_NAME).options(**source_options).load()
              .selectExpr(f"cast(cast(value as string) as int) % {USERS} as n", "cast(value as string) as payload",
                          "timestamp as ts")
              .selectExpr("concat('u', cast(n as string)) as user", "payload", "ts")
              .withWatermark("ts", "0 seconds"))
    counted = keyed_process(events, ["user"], RunningCount(), "key STRING, value STRING", event_time_column="ts",
                            **keyed)
    return (counted.writeStream.format(FORMAT_NAME).options(**sink_options)
            .option("checkpointLocation", str(checkpoint)).start())


def test_stop_with_savepoint_commits_the_groups_offsets_and_the_new_query_writes_every_output_once(
        spark, kafka_broker, tmp_path):
    bs = kafka_broker.bootstrap
    source, out = create_topic(bs, 2), create_topic(bs, 2)
    group = unique("savepoint-group")
    produce(bs, source, 100, 2)
    source_options = {"kafka.bootstrap.servers": bs, "subscribe": source, "group.id": group,
                      "startingOffsets": "group", "groupOffsetReset": "earliest", "maxOffsetsPerTrigger": "40"}
    sink_options = {"kafka.bootstrap.servers": bs, "topic": out, "transactionalIdPrefix": unique("counts")}

    first = start(spark, source_options, sink_options, tmp_path / "v1", state_backend="heap", num_key_groups=4,
                  state_storage=str(tmp_path / "storage"))
    try:
        first.processAllAvailable()
    except BaseException:
        first.stop()
        raise
    savepoint = stop_with_savepoint(first, str(tmp_path / "savepoint"), kafka_source_options=source_options,
                                    state_backend="rocksdb", num_key_groups=8, state_storage=str(tmp_path / "storage"))
    end = {int(p): o for p, o in savepoint.source_offsets[0][source].items()}
    assert sum(end.values()) == 100
    # Whether the group had the last batch's offsets before the savepoint depends on timing (the source commits a
    # batch's offsets asynchronously, once Spark commits the batch, and a no-data batch after the last one may or
    # may not have run): the savepoint's own record of its commit is what says it committed them.
    assert committed_offsets(bs, group, source, 2) == end
    [commit] = savepoint.kafka_group_commits
    assert (commit["group_id"], commit["batch_id"]) == (group, savepoint.batch_id)

    produce(bs, source, 60, 2, start=100)
    second = start(spark, source_options, sink_options, tmp_path / "v2", state_backend="rocksdb", num_key_groups=8,
                   initial_state=savepoint, state_storage=str(tmp_path / "storage"),
                   state_local_dir=str(tmp_path / "local"))
    try:
        second.processAllAvailable()
    finally:
        second.stop()
    assert second.id != first.id

    values = [value.decode() for _, _, value, _ in read_committed(bs, out)]
    payloads = Counter(int(value.split(":")[1]) for value in values)
    assert payloads == Counter(range(160))  # every record's output once: none lost, none twice
    for user in range(USERS):  # each user's count runs 1..n across the switch
        counts = sorted(int(v.split(":")[2]) for v in values if v.startswith(f"u{user}:"))
        assert counts == list(range(1, len(counts) + 1))
