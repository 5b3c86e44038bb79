"""Finding and deleting a query's progress-marker groups on a real broker, without Spark: only groups named
``<prefix>-<query id>-<n>`` match, a prefix narrows them, a group with a member is refused (and the others still go),
and a group deleted meanwhile counts as deleted."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka.progress_groups import delete_progress_groups, find_progress_groups
from kafka_helpers import create_topic, unique, wait_for
from keyedstate.errors import CleanupRefusedError

pytestmark = pytest.mark.kafka


def _commit_marker(bootstrap: str, group: str, topic: str) -> None:
    """A committed offset and no member: what the sink leaves (its marker consumers never join the group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": "false"})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        consumer.close()


def test_a_querys_groups_are_found_by_its_id_narrowed_by_prefix_and_deleted(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    query_id, other_query = str(uuid.uuid4()), str(uuid.uuid4())
    prefix, other_prefix = unique("alerts"), unique("audit")
    ours = [f"{prefix}-{query_id}-0", f"{prefix}-{query_id}-1", f"{other_prefix}-{query_id}-0"]
    for group in [*ours, f"{prefix}-{other_query}-0", f"{prefix}-{query_id}-x"]:
        _commit_marker(bs, group, topic)

    found = find_progress_groups(bs, query_id)
    assert sorted(group.group_id for group in found) == sorted(ours)
    assert all(group.state == "EMPTY" and not group.in_use for group in found)
    narrowed = find_progress_groups(bs, query_id, transactional_id_prefix=prefix)
    assert [(group.group_id, group.partition) for group in narrowed] == [(ours[0], 0), (ours[1], 1)]

    # the sink's option names work for the admin client as they are
    assert delete_progress_groups(bs, narrowed, kafka_options={"kafka.client.rack": "r1"}) == ours[:2]
    assert [group.group_id for group in find_progress_groups(bs, query_id)] == [ours[2]]
    assert delete_progress_groups(bs, narrowed) == ours[:2]  # already gone: nothing left to delete
    assert [group.group_id for group in find_progress_groups(bs, other_query)] == [f"{prefix}-{other_query}-0"]


def test_a_group_with_a_member_is_reported_in_use_and_refused_while_the_others_go(kafka_broker):
    bs = kafka_broker.bootstrap
    topic = create_topic(bs, 1)
    query_id, prefix = str(uuid.uuid4()), unique("alerts")
    idle, used = f"{prefix}-{query_id}-0", f"{prefix}-{query_id}-1"
    _commit_marker(bs, idle, topic)
    member = Consumer({"bootstrap.servers": bs, "group.id": used, "session.timeout.ms": "30000"})
    try:
        member.subscribe([topic])
        wait_for(lambda: member.poll(0.2) is None and bool(member.assignment()), 60, "the member joins its group")
        groups = find_progress_groups(bs, query_id)
        assert [(group.group_id, group.in_use) for group in groups] == [(idle, False), (used, True)]
        with pytest.raises(CleanupRefusedError, match=f"consumer group\\(s\\) {used} on {bs} have members"):
            delete_progress_groups(bs, groups)
        assert [group.group_id for group in find_progress_groups(bs, query_id)] == [used]
    finally:
        member.close()
