"""Parsing and validation of the ``keyedstate-kafka`` source options.

Option names follow Spark's built-in Kafka source where they overlap. Parsing runs wherever a :class:`KafkaOptions`
is built: when the query is defined (``DataSource.__init__`` in Spark's planner worker, so mistakes surface at
``load()``), again in the driver's stream-reader process, and in the listener helper.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from connectors.kafka.errors import KafkaConfigurationError, MissingGroupIdError
from connectors.kafka.option_values import bool_option, int_option, retry_options, split_options

__all__ = ["KafkaOptions", "StartingOffsets", "parse_options"]

log = logging.getLogger("keyedstate.connectors.kafka.source_options")

#: ``startingOffsets`` values that are not JSON.
STARTING_MODES = ("group", "earliest", "latest")

#: Options this source understands (lower-cased); anything else that is not ``kafka.*`` is rejected.
KNOWN = {
    "kafka.bootstrap.servers", "subscribe", "subscribepattern", "assign", "startingoffsets", "startingtimestamp",
    "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger", "minpartitions",
    "failondataloss", "group.id", "commitoffsets", "groupoffsetreset", "brokerretrytimeoutms", "retrybackoffms",
    "requesttimeoutms", "maxbatchrecords", "path",
}

#: librdkafka properties the source sets itself; user values would break exactly-once reads.
FORBIDDEN_KAFKA = {"enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "group.id"}

#: Per-partition starting offsets: ``{topic: {partition: offset}}`` with -2 = earliest, -1 = latest.
StartingOffsets = dict[str, dict[int, int]]


@dataclass(frozen=True)
class KafkaOptions:
    """Validated options of one source instance."""

    bootstrap_servers: str
    subscribe: Optional[tuple[str, ...]] = None
    subscribe_pattern: Optional[str] = None
    assign: Optional[dict[str, tuple[int, ...]]] = None
    starting: Union[str, StartingOffsets] = "latest"
    starting_timestamp: Optional[int] = None
    starting_by_timestamp: Optional[dict[str, dict[int, int]]] = None
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: Optional[int] = None
    min_partitions: Optional[int] = None
    fail_on_data_loss: bool = True
    group_id: Optional[str] = None
    commit_offsets: bool = True
    group_offset_reset: str = "latest"
    broker_retry_timeout_ms: int = 120_000
    retry_backoff_ms: int = 500
    request_timeout_ms: int = 10_000
    max_batch_records: int = 10_000
    kafka: dict[str, str] = field(default_factory=dict)

    def reads_topic(self, topic: str) -> bool:
        """Whether this source reads ``topic`` (subscribed, assigned, or matching the pattern)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.assign is not None:
            return topic in self.assign
        return bool(self.subscribe_pattern and re.fullmatch(self.subscribe_pattern, topic))

    @property
    def topics_description(self) -> str:
        """Human-readable subscription for error messages."""
        if self.subscribe:
            return "topic " + ", ".join(repr(t) for t in self.subscribe)
        if self.subscribe_pattern:
            return f"topics matching {self.subscribe_pattern!r}"
        assert self.assign is not None
        return "topic " + ", ".join(repr(t) for t in self.assign)

    def librdkafka_config(self, role: str) -> dict[str, Any]:
        """librdkafka configuration for a client in ``role``: "admin", "consumer" (executor reads) or "committer"
        (driver-side group offsets; never subscribes)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}  # str values, and callbacks
        conf.setdefault("client.id", f"keyedstate-kafka-{role}")
        if role == "consumer":
            conf.update({
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
                "enable.partition.eof": "true",
                "auto.offset.reset": "error",
                # Readers never join or commit to a group; librdkafka still needs a name.
                "group.id": "keyedstate-kafka-reader",
                "fetch.wait.max.ms": "100",
                # librdkafka pauses fetching a partition for fetch.queue.backoff.ms (default 1 s) whenever its
                # prefetch queue holds more than queued.min.messages (default 100,000); at the default a task of
                # 500,000 records spent 4 of its 5 s in that pause. Raising queued.min.messages instead makes every
                # task prefetch the rest of its partition: a task of 125,000 records then fetched and decompressed
                # all 500,000, most of its CPU. So the queue keeps librdkafka's default size and the pause is short.
                "fetch.queue.backoff.ms": "10",
            })
        conf.update(self.kafka)
        # librdkafka's own log lines go to Python logging instead of stderr.
        conf["logger"] = logging.getLogger(f"keyedstate.connectors.kafka.librdkafka.{role}")
        conf.setdefault("log.connection.close", "false")
        if role == "committer":
            conf.update({"enable.auto.commit": "false", "enable.auto.offset.store": "false"})
        if role in ("admin", "committer"):
            for k in ("enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof", "auto.offset.reset",
                      "fetch.wait.max.ms", "queued.min.messages", "fetch.queue.backoff.ms", "isolation.level",
                      "fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes"):
                conf.pop(k, None)
        return conf

    @property
    def read_committed(self) -> bool:
        """librdkafka's default isolation level is read_committed; end offsets are then the last stable offset."""
        return self.kafka.get("isolation.level", "read_committed") == "read_committed"


def _json_obj(name: str, raw: str) -> dict:
    try:
        v = json.loads(raw)
    except json.JSONDecodeError as e:
        raise KafkaConfigurationError(
            f"option {name} is not valid JSON ({e}); expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-2}}}}"
        ) from None
    if not isinstance(v, dict):
        raise KafkaConfigurationError(f"option {name} must be a JSON object keyed by topic, got {raw!r}")
    return v


def _per_partition(name: str, raw: str, allow_sentinels: bool) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for topic, parts in _json_obj(name, raw).items():
        if not isinstance(parts, dict):
            raise KafkaConfigurationError(f"option {name}: topic {topic!r} must map partition -> offset")
        out[topic] = {}
        for p, off in parts.items():
            try:
                pi, oi = int(p), int(off)
            except (TypeError, ValueError):
                raise KafkaConfigurationError(f"option {name}: {topic}[{p}]={off!r} is not an integer") from None
            if oi < (-2 if allow_sentinels else 0):
                raise KafkaConfigurationError(f"option {name}: {topic}[{p}]={oi} is negative"
                                              + (" (only -2 = earliest and -1 = latest are allowed)"
                                                 if allow_sentinels else ""))
            out[topic][pi] = oi
    return out


def parse_options(options: Mapping[str, str]) -> KafkaOptions:
    """Validate ``options`` (case-insensitive names, string values) and return :class:`KafkaOptions`.

    Raises :class:`KafkaConfigurationError` (or :class:`MissingGroupIdError`) naming the option to fix.
    """
    opts, kafka, servers = split_options(
        options, KNOWN, FORBIDDEN_KAFKA, "source", "security.protocol",
        "the source manages them (use option group.id for the consumer group and startingOffsets/groupOffsetReset "
        "for where to start)")

    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    if len(given) != 1:
        raise KafkaConfigurationError(
            "exactly one of the options subscribe, subscribePattern, assign must be set"
            + (f" (got {', '.join(given)})" if given else ""))
    subscribe = pattern = assign = None
    if "subscribe" in given:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise KafkaConfigurationError("option subscribe names no topic")
    elif "subscribepattern" in given:
        pattern = opts["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as e:
            raise KafkaConfigurationError(f"option subscribePattern={pattern!r} is not a valid regex: {e}") from None
    else:
        assign = {}
        for topic, parts in _json_obj("assign", opts["assign"]).items():
            if not isinstance(parts, list) or not all(isinstance(p, int) and p >= 0 for p in parts):
                raise KafkaConfigurationError(
                    f"option assign: topic {topic!r} must map to a list of partition numbers, e.g. {{\"t\":[0,1]}}")
            assign[topic] = tuple(sorted(set(parts)))

    raw_start = opts.get("startingoffsets", "latest").strip()
    starting: Union[str, StartingOffsets]
    if raw_start.lower() in STARTING_MODES:
        starting = raw_start.lower()
    elif raw_start.startswith("{"):
        starting = _per_partition("startingOffsets", raw_start, allow_sentinels=True)
        topics = set(subscribe or ()) | set(assign or {})
        extra = sorted(set(starting) - topics) if (subscribe or assign) else []
        if extra:
            raise KafkaConfigurationError(
                f"option startingOffsets names topic(s) {', '.join(extra)} that are not subscribed/assigned")
    else:
        raise KafkaConfigurationError(
            f"option startingOffsets={raw_start!r} is invalid; use group, earliest, latest or per-partition JSON")

    starting_ts = None
    if "startingtimestamp" in opts:
        starting_ts = int_option("startingTimestamp", opts["startingtimestamp"], 0)
    by_ts = None
    if "startingoffsetsbytimestamp" in opts:
        by_ts = _per_partition("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"], False)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise KafkaConfigurationError(
            f"option startingOffsetsByTimestampStrategy={strategy!r} is invalid; use error or latest")

    group_id = opts.get("group.id", "").strip() or None
    commit = bool_option("commitOffsets", opts.get("commitoffsets", "true"))
    if commit and not group_id:
        raise MissingGroupIdError(
            "offset commits are on (commitOffsets=true, the default) but option group.id is not set; set "
            "group.id to the consumer group whose offsets should track this query, or set commitOffsets=false")
    if starting == "group" and not group_id:
        raise MissingGroupIdError("startingOffsets=group needs option group.id (the group whose offsets to start from)")
    reset = opts.get("groupoffsetreset", "latest").lower()
    if reset not in ("earliest", "latest", "none"):
        raise KafkaConfigurationError(f"option groupOffsetReset={reset!r} is invalid; use earliest, latest or none")

    max_per_trigger = None
    if "maxoffsetspertrigger" in opts:
        max_per_trigger = int_option("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"], 1)
    min_parts = None
    if "minpartitions" in opts:
        min_parts = int_option("minPartitions", opts["minpartitions"], 1)
    return KafkaOptions(
        bootstrap_servers=servers,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        starting_timestamp=starting_ts,
        starting_by_timestamp=by_ts,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=min_parts,
        fail_on_data_loss=bool_option("failOnDataLoss", opts.get("failondataloss", "true")),
        group_id=group_id,
        commit_offsets=commit,
        group_offset_reset=reset,
        **retry_options(opts),
        max_batch_records=int_option("maxBatchRecords", opts.get("maxbatchrecords", "10000"), 1),
        kafka=kafka,
    )
