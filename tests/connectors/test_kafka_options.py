"""Option parsing and validation (no broker needed)."""

from __future__ import annotations

import pytest

from connectors.kafka import KafkaConfigurationError, MissingGroupIdError, parse_options
from connectors.kafka.sink_options import parse_sink_options
from keyedstate.errors import ConfigurationError, KeyedStateError

BASE = {"kafka.bootstrap.servers": "b1:9092,b2:9092", "subscribe": "t", "group.id": "g"}
SINK_BASE = {"kafka.bootstrap.servers": "b1:9092", "topic": "out", "transactionalIdPrefix": "p"}


def test_defaults_follow_spark_and_kafka():
    o = parse_options(BASE)
    assert o.subscribe == ("t",)
    assert o.starting == "latest" and o.fail_on_data_loss and o.commit_offsets
    assert o.group_offset_reset == "latest"
    assert o.max_offsets_per_trigger is None and o.min_partitions is None
    assert o.broker_retry_timeout_ms == 120_000


def test_option_names_are_case_insensitive_and_kafka_properties_pass_through():
    o = parse_options({"KAFKA.BOOTSTRAP.SERVERS": "b:1", "Subscribe": "a, b", "GROUP.ID": "g",
                       "kafka.security.protocol": "PLAINTEXT", "kafka.fetch.max.bytes": "1000",
                       "maxOffsetsPerTrigger": "10", "minPartitions": "4"})
    assert o.subscribe == ("a", "b")
    assert o.kafka == {"security.protocol": "PLAINTEXT", "fetch.max.bytes": "1000"}
    conf = o.librdkafka_config("consumer")
    assert conf["bootstrap.servers"] == "b:1" and conf["security.protocol"] == "PLAINTEXT"
    assert conf["enable.auto.commit"] == "false" and conf["fetch.max.bytes"] == "1000"
    assert "fetch.max.bytes" not in o.librdkafka_config("admin")
    assert o.max_offsets_per_trigger == 10 and o.min_partitions == 4



def test_executor_consumers_retry_a_full_prefetch_queue_quickly_and_keep_its_default_depth_unless_overridden():
    conf = parse_options(BASE).librdkafka_config("consumer")
    # librdkafka's 1 s backoff stalls a task that drains a large range once its queue fills; a deeper queue than
    # librdkafka's default (100,000) makes a small range prefetch, and decompress, the rest of its partition
    assert conf["fetch.queue.backoff.ms"] == "10" and "queued.min.messages" not in conf
    overridden = parse_options({**BASE, "kafka.queued.min.messages": "5000", "kafka.fetch.queue.backoff.ms": "500"})
    conf = overridden.librdkafka_config("consumer")
    assert conf["queued.min.messages"] == "5000" and conf["fetch.queue.backoff.ms"] == "500"
    for role in ("admin", "committer"):  # consumer-only properties never reach clients that do not fetch
        assert not {"queued.min.messages", "fetch.queue.backoff.ms"} & set(parse_options(BASE).librdkafka_config(role))


@pytest.mark.parametrize("opts, match", [
    ({"subscribe": "t", "group.id": "g"}, "kafka.bootstrap.servers is required"),
    ({**BASE, "assign": '{"t":[0]}'}, "exactly one of the options subscribe, subscribePattern, assign"),
    ({"kafka.bootstrap.servers": "b:1", "group.id": "g"}, "exactly one of"),
    ({**BASE, "startingOffsets": "yesterday"}, "startingOffsets='yesterday' is invalid"),
    ({**BASE, "startingOffsets": '{"t": {"0": "x"}}'}, "not an integer"),
    ({**BASE, "startingOffsets": '{"other": {"0": 1}}'}, "not subscribed"),
    ({**BASE, "startingOffsets": '{"t": {"0": -3}}'}, "-2 = earliest"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger=0 must be >= 1"),
    ({**BASE, "failOnDataLoss": "maybe"}, "failOnDataLoss='maybe' is not a boolean"),
    ({**BASE, "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit cannot be set"),
    ({**BASE, "kafka.group.id": "x"}, "use option group.id"),
    ({**BASE, "startingOffset": "earliest"}, "unknown option"),
    ({**BASE, "subscribe": None, "subscribePattern": "[bad"}, "not a valid regex"),
    ({**BASE, "subscribe": None, "assign": '{"t": "0"}'}, "list of partition numbers"),
    ({**BASE, "groupOffsetReset": "smallest"}, "groupOffsetReset='smallest' is invalid"),
    ({**BASE, "startingOffsetsByTimestampStrategy": "earliest"}, "use error or latest"),
])
def test_invalid_options_name_the_option(opts, match):
    opts = {k: v for k, v in opts.items() if v is not None}
    with pytest.raises(KafkaConfigurationError, match=match) as e:
        parse_options(opts)
    assert isinstance(e.value, ConfigurationError) and isinstance(e.value, KeyedStateError)


def test_commits_need_a_group_id_unless_turned_off():
    with pytest.raises(MissingGroupIdError, match="group.id") as e:
        parse_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t"})
    assert "commitOffsets=false" in str(e.value)
    assert not parse_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t",
                              "commitOffsets": "false"}).commit_offsets
    with pytest.raises(MissingGroupIdError, match="startingOffsets=group"):
        parse_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "commitOffsets": "false",
                       "startingOffsets": "group"})


def test_assign_and_pattern():
    o = parse_options({**BASE, "subscribe": "", "assign": '{"t": [2, 0, 2]}'})
    assert o.assign == {"t": (0, 2)} and o.subscribe is None
    o = parse_options({"kafka.bootstrap.servers": "b:1", "subscribePattern": "ev-.*", "commitOffsets": "false"})
    assert o.subscribe_pattern == "ev-.*"


JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
        'password="s3cr3t-pw";')


@pytest.mark.parametrize("parse, base", [(parse_options, BASE), (parse_sink_options, SINK_BASE)],
                         ids=["source", "sink"])
def test_a_java_jaas_config_is_refused_up_front_with_librdkafka_properties_to_use_and_no_secret(parse, base):
    with pytest.raises(KafkaConfigurationError) as e:
        parse({**base, "kafka.security.protocol": "SASL_SSL", "KAFKA.SASL.JAAS.CONFIG": JAAS})
    msg = str(e.value)
    assert "kafka.sasl.jaas.config='*********(redacted)'" in msg
    assert "kafka.sasl.mechanism=SCRAM-SHA-256 or SCRAM-SHA-512" in msg
    assert "kafka.sasl.username" in msg and "kafka.sasl.password" in msg
    assert "s3cr3t-pw" not in msg and "alice" not in msg


def test_source_and_sink_refuse_a_jaas_config_with_the_same_message():
    plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    with pytest.raises(KafkaConfigurationError) as source:
        parse_options({**BASE, "kafka.sasl.jaas.config": plain})
    with pytest.raises(KafkaConfigurationError) as sink:
        parse_sink_options({**SINK_BASE, "kafka.sasl.jaas.config": plain})
    assert str(source.value) == str(sink.value) and "kafka.sasl.mechanism=PLAIN," in str(sink.value)
