"""Driver-side Kafka requests (metadata, offsets, group offsets, commits) with the broker-outage retry budget.

Used by the stream reader (in the long-lived Python process the driver JVM starts for the data source) and by the
listener helper (in the user's driver process). Executors never use this module; see :mod:`connectors.kafka.fetch`.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Callable, Iterable, Optional

from confluent_kafka import OFFSET_INVALID, Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from connectors.kafka import error_codes
from connectors.kafka.errors import KafkaRequestError, UnknownTopicError
from connectors.kafka.offsets import TP, fmt_offsets
from connectors.kafka.retry import RetryBudget, call_with_retry
from connectors.kafka.source_options import KafkaOptions

__all__ = ["KafkaClient"]

log = logging.getLogger("keyedstate.connectors.kafka.client")


class KafkaClient:
    """One AdminClient plus the retry budget of :class:`KafkaOptions`."""

    def __init__(self, opts: KafkaOptions) -> None:
        self.opts = opts
        self.brokers = opts.bootstrap_servers
        config = opts.librdkafka_config("admin")
        self._errors = config["error_cb"] = error_codes.ClientErrors()
        try:
            self._admin = AdminClient(config)
        except KafkaException as exc:
            raise error_codes.rejected_configuration("source's admin client", exc, config) from None
        self._timeout_s = opts.request_timeout_ms / 1000
        self.budget = RetryBudget(opts.broker_retry_timeout_ms, opts.retry_backoff_ms, self.brokers,
                                  security_protocol=opts.kafka.get("security.protocol"),
                                  client_errors=self._client_errors)
        self._lock = threading.Lock()
        self._group_consumers: dict[str, Consumer] = {}
        self._isolation = (IsolationLevel.READ_COMMITTED if opts.read_committed else IsolationLevel.READ_UNCOMMITTED)

    def _client_errors(self) -> list[str]:
        self._admin.poll(0)  # an admin client hands librdkafka's error events to error_cb only when polled
        return list(self._errors.texts)

    def topic_partitions(self, *, fail_on_unknown: bool = True) -> dict[str, list[int]]:
        """Current partitions of the subscribed/assigned topics (partition discovery runs through here).

        ``subscribe``/``assign`` naming a missing topic raises :class:`UnknownTopicError` when ``fail_on_unknown``;
        otherwise missing topics are left out.
        """
        metadata = call_with_retry(lambda: self._admin.list_topics(timeout=self._timeout_s), self.budget,
                                   topic=self.opts.topics_description, action="fetching topic metadata")
        existing: dict[str, list[int]] = {}
        for name, tmd in metadata.topics.items():
            if tmd.error is not None and error_codes.is_unknown_topic(tmd.error):
                continue
            existing[name] = sorted(tmd.partitions)
        o = self.opts
        if o.subscribe_pattern is not None:
            rx = re.compile(o.subscribe_pattern)
            return {t: ps for t, ps in sorted(existing.items()) if rx.fullmatch(t) and not t.startswith("__")}
        wanted = list(o.subscribe) if o.subscribe else list((o.assign or {}).keys())
        missing = [t for t in wanted if t not in existing or not existing[t]]
        if missing and fail_on_unknown:
            raise UnknownTopicError(
                f"topic(s) {', '.join(repr(t) for t in missing)} do not exist on Kafka brokers {self.brokers}; "
                f"create them or fix option {'subscribe' if o.subscribe else 'assign'}")
        out: dict[str, list[int]] = {}
        for t in wanted:
            if t not in existing:
                continue
            if o.assign is not None:
                absent = [p for p in o.assign[t] if p not in existing[t]]
                if absent and fail_on_unknown:
                    raise UnknownTopicError(
                        f"topic {t!r} on brokers {self.brokers} has no partition(s) {absent} (it has "
                        f"{len(existing[t])}); fix option assign")
                out[t] = [p for p in o.assign[t] if p in existing[t]]
            else:
                out[t] = existing[t]
        return out

    def list_offsets(self, tps: Iterable[TP], spec: str | int) -> dict[TP, int]:
        """Offsets per partition for ``spec`` = "earliest", "latest" (the last stable offset under read_committed)
        or an epoch-millisecond timestamp (first offset with timestamp >= it, -1 if none)."""
        tps = list(tps)
        if not tps:
            return {}
        if spec == "earliest":
            s = OffsetSpec.earliest()
        elif spec == "latest":
            s = OffsetSpec.latest()
        else:
            s = OffsetSpec.for_timestamp(int(spec))
        request = {TopicPartition(t, p): s for t, p in tps}
        attempts = [0]

        def run() -> dict[TP, int]:
            attempts[0] += 1
            if attempts[0] > 1:
                # ListOffsets goes to the leaders in librdkafka's metadata cache, which a failed request does not
                # refresh; a metadata request does (and finds the new leaders after a failover).
                try:
                    self._admin.list_topics(timeout=self._timeout_s)
                except KafkaException:
                    pass
            futures = self._admin.list_offsets(request, isolation_level=self._isolation,
                                               request_timeout=self._timeout_s)
            out: dict[TP, int] = {}
            for tp, fut in futures.items():
                res = fut.result(timeout=self._timeout_s + 5)
                off = int(res.offset)
                if off == OFFSET_INVALID or (spec in ("earliest", "latest") and off < 0):
                    # no answer for this partition (leader moving or down): retry within the budget
                    raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE,
                                                    f"no {spec} offset for {tp.topic}[{tp.partition}] (leader "
                                                    f"unavailable)"))
                out[(tp.topic, tp.partition)] = off
            return out

        return call_with_retry(run, self.budget, topic=_describe(tps), action=f"listing {spec} offsets")

    def committed(self, group_id: str, tps: Iterable[TP]) -> dict[TP, int]:
        """The group's committed offsets (next offset to read); partitions without one are absent."""
        tps = list(tps)
        if not tps:
            return {}
        return call_with_retry(lambda: self._committed_once(group_id, tps), self.budget, topic=_describe(tps),
                               action=f"reading committed offsets of group {group_id!r}")

    def _group_consumer(self, group_id: str) -> Consumer:
        """A Consumer that carries ``group_id`` but never subscribes (so it never joins the group).

        Group offsets are read and written through it rather than through the AdminClient: librdkafka 2.16's
        admin ListConsumerGroupOffsets crashes the process on NOT_COORDINATOR responses (it dereferences the
        consumer-group handle an AdminClient does not have), and admin AlterConsumerGroupOffsets does not retry
        NOT_COORDINATOR, which brokers return right after startup and during failover.
        """
        with self._lock:
            c = self._group_consumers.get(group_id)
            if c is None:
                conf = self.opts.librdkafka_config("committer")
                conf["group.id"] = group_id
                c = Consumer(conf)
                self._group_consumers[group_id] = c
            return c

    def commit_sync(self, group_id: str, offsets: dict[TP, int], *, never_backwards: bool = True) -> dict[TP, int]:
        """Commit ``offsets`` (next offset to read) for ``group_id``; return what was actually sent.

        With ``never_backwards`` partitions whose committed offset is already higher are left alone, so the
        listener helper and the stream reader (separate processes) cannot move a group backwards by racing.
        One attempt, no retry budget: a failed commit is reported to the caller, and the next checkpoint commits.
        """
        send = dict(offsets)
        if never_backwards and send:
            current = self._committed_once(group_id, list(send))
            send = {tp: o for tp, o in send.items() if current.get(tp, -1) < o}
        if not send:
            return {}
        result = self._group_consumer(group_id).commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(send.items())], asynchronous=False)
        for tp in result or []:
            if tp.error is not None:
                raise error_codes.translate(tp.error, brokers=self.brokers, topic=f"{tp.topic}[{tp.partition}]",
                                            action=f"committing offsets of group {group_id!r}")
        return send

    def _committed_once(self, group_id: str, tps: list[TP]) -> dict[TP, int]:
        res = self._group_consumer(group_id).committed([TopicPartition(t, p) for t, p in tps],
                                                       timeout=self._timeout_s)
        out: dict[TP, int] = {}
        for tp in res:
            if tp.error is not None:
                raise KafkaException(tp.error)
            if tp.offset >= 0:
                out[(tp.topic, tp.partition)] = int(tp.offset)
        return out

    def close(self) -> None:
        with self._lock:
            for c in self._group_consumers.values():
                try:
                    c.close()
                except Exception:  # noqa: BLE001 - best effort
                    pass
            self._group_consumers.clear()

    def async_commit_function(self, group_id: str) -> Callable[[dict[TP, int], Callable[[Optional[BaseException]],
                                                                                           None]], None]:
        """A :data:`connectors.kafka.committer.CommitFunction` committing on a background thread."""

        def commit(offsets: dict[TP, int], done: Callable[[Optional[BaseException]], None]) -> None:
            def work() -> None:
                try:
                    sent = self.commit_sync(group_id, offsets)
                    log.info("committed offsets of group %r: %s", group_id,
                             fmt_offsets(sent) if sent else "(unchanged)")
                except Exception as exc:  # noqa: BLE001 - reported to the committer, which counts and logs it
                    done(exc if not isinstance(exc, KafkaException) else KafkaRequestError(str(exc)))
                    return
                done(None)

            threading.Thread(target=work, name="keyedstate-kafka-commit", daemon=True).start()

        return commit


def _describe(tps: list[TP]) -> str:
    topics = sorted({t for t, _ in tps})
    return "topic " + ", ".join(repr(t) for t in topics)
