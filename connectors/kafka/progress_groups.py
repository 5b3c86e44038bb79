"""Finding and deleting the exactly-once sink's progress-marker consumer groups of one query (the clean-up after a
stopped query, :func:`keyedstate.cleanup.clean_up_query`).

The sink names each write partition's group like its transactional id, ``<transactionalIdPrefix>-<query id>-<p>``
(:meth:`connectors.kafka.sink_options.KafkaSinkOptions.transactional_id`). The checkpoint holds the query id but
not the prefix, so the groups are found by listing the cluster's groups and matching ``-<query id>-<digits>`` at the
end: the query id is a random UUID, so no other client's group matches by chance. Given the prefix, only groups with
exactly that prefix match.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Mapping, Optional

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from connectors.kafka import error_codes
from connectors.kafka.errors import KafkaConfigurationError
from connectors.kafka.retry import RetryBudget, call_with_retry
from keyedstate.errors import CleanupRefusedError

__all__ = ["ProgressGroup", "find_progress_groups", "delete_progress_groups"]

log = logging.getLogger("keyedstate.connectors.kafka.progress_groups")

_WHAT = "the sink's progress-marker consumer groups"
_IDLE_STATES = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)


@dataclass(frozen=True)
class ProgressGroup:
    """One write partition's progress-marker group; ``state`` is the broker's group state (``EMPTY``: no member)."""

    group_id: str
    partition: int
    state: str

    @property
    def in_use(self) -> bool:
        """The group has members: some client (a running query's sink never joins; something else does) uses it."""
        return self.state not in {state.name for state in _IDLE_STATES}


class _Admin:
    def __init__(self, bootstrap_servers: str, kafka_options: Optional[Mapping[str, str]], timeout_s: float) -> None:
        if not bootstrap_servers or not isinstance(bootstrap_servers, str):
            raise KafkaConfigurationError(f"bootstrap_servers must be 'host:port[,host:port...]', got "
                                          f"{bootstrap_servers!r}")
        # the sink's own option names (kafka.security.protocol, ...) work as they are
        conf: dict[str, str | int | float | bool] = {
            (key[len("kafka."):] if key.startswith("kafka.") else key): str(value)
            for key, value in (kafka_options or {}).items()}
        conf.update({"bootstrap.servers": bootstrap_servers, "client.id": "keyedstate-cleanup"})
        self.brokers = bootstrap_servers
        self.client = AdminClient(conf)
        self.timeout_s = timeout_s
        self.budget = RetryBudget(int(timeout_s * 1000), 500, bootstrap_servers)


def find_progress_groups(bootstrap_servers: str, query_id: str, *, transactional_id_prefix: Optional[str] = None,
                         kafka_options: Optional[Mapping[str, str]] = None,
                         timeout_s: float = 30.0) -> list[ProgressGroup]:
    """The progress-marker groups the exactly-once sink of query ``query_id`` left on the cluster, by partition.

    ``kafka_options``: librdkafka properties for the admin client (security, SASL), with or without the sink's
    ``kafka.`` prefix. Brokers that stay unreachable for ``timeout_s`` raise BrokersUnavailableError."""
    admin = _Admin(bootstrap_servers, kafka_options, timeout_s)
    pattern = re.compile(rf"^(?P<prefix>.+)-{re.escape(query_id)}-(?P<partition>\d+)$")
    listing = call_with_retry(lambda: admin.client.list_consumer_groups(request_timeout=timeout_s).result(),
                              admin.budget, topic=_WHAT, action="listing consumer groups")
    groups = []
    for group in listing.valid:
        match = pattern.match(group.group_id)
        if match is None or (transactional_id_prefix is not None and match["prefix"] != transactional_id_prefix):
            continue
        state = group.state.name if group.state is not None else ConsumerGroupState.UNKNOWN.name
        groups.append(ProgressGroup(group.group_id, int(match["partition"]), state))
    return sorted(groups, key=lambda group: (group.partition, group.group_id))


def delete_progress_groups(bootstrap_servers: str, groups: list[ProgressGroup], *,
                           kafka_options: Optional[Mapping[str, str]] = None, timeout_s: float = 30.0) -> list[str]:
    """Delete ``groups``; returns the ids deleted (a group already gone counts as deleted). A group that gained a
    member meanwhile raises CleanupRefusedError naming it; the others are still deleted."""
    if not groups:
        return []
    admin = _Admin(bootstrap_servers, kafka_options, timeout_s)
    deleted, in_use = [], []
    for group in groups:
        def delete(group_id: str = group.group_id) -> None:
            admin.client.delete_consumer_groups([group_id], request_timeout=timeout_s)[group_id].result()

        try:
            call_with_retry(delete, admin.budget, topic=f"consumer group {group.group_id!r}",
                            action="deleting a progress-marker consumer group")
        except Exception as error:  # noqa: BLE001 - classified by error_codes; our translation keeps the cause
            cause = error.__cause__ if error.__cause__ is not None else error
            if error_codes.is_group_not_found(cause):
                deleted.append(group.group_id)
                continue
            if error_codes.is_group_in_use(cause):
                in_use.append(group.group_id)
                continue
            raise
        log.info("deleted consumer group %s on %s", group.group_id, bootstrap_servers)
        deleted.append(group.group_id)
    if in_use:
        raise CleanupRefusedError(
            f"consumer group(s) {', '.join(in_use)} on {bootstrap_servers} have members: a client is using them, "
            f"so the query (or another one with the same transactional id prefix) may be running. Stop it and run the "
            f"clean-up again")
    return deleted
