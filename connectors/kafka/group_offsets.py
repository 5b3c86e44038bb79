"""The consumer-group side of ``keyedstate.spark.stop_with_savepoint``: commit the savepoint batch's end offsets of
the keyedstate-kafka source to its consumer group, so a new query started in group mode resumes at the next record.

The source commits batch N's offsets only when batch N+1 is planned (and the commit listener right after N's commit
log entry), so after a stop the group is usually one batch behind the savepoint. The commit here never moves the
group backwards (a late commit of an older batch by the stopped query's reader cannot either); a group that already
stands beyond the savepoint's batch is refused, since a new query would skip the records in between.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence

from connectors.kafka.errors import KafkaConfigurationError
from connectors.kafka.offsets import fmt_offsets, offsets_of_sources, to_offset_json
from connectors.kafka.source_options import parse_options

__all__ = ["commit_savepoint_offsets"]

log = logging.getLogger("keyedstate.connectors.kafka.group_offsets")


def commit_savepoint_offsets(source_options: Mapping[str, str], sources: Sequence[Optional[Mapping[str, Any]]],
                             source_index: Optional[int], batch_id: int) -> Optional[dict[str, Any]]:
    """Commit the source's end offsets of ``batch_id`` (from ``sources``, the batch's offsets-log lines) to its
    group; returns ``{"group_id", "offsets", "batch_id"}``, or None when the source commits no group offsets."""
    opts = parse_options(dict(source_options))
    if not opts.group_id or not opts.commit_offsets:
        return None
    found = offsets_of_sources(sources, source_index, opts.reads_topic)
    if len(found) > 1:
        raise KafkaConfigurationError(f"{len(found)} sources of the query read {opts.topics_description}; pass "
                                      f"kafka_source_index= (the source's position in the query)")
    offsets = found[0] if found else {}
    if not offsets:
        raise KafkaConfigurationError(
            f"batch {batch_id} has no offsets of {opts.topics_description} in the query's offsets log; pass the "
            f"options of the query's keyedstate-kafka source as kafka_source_options (or kafka_source_index=)")
    from connectors.kafka.client import KafkaClient

    client = KafkaClient(opts)
    try:
        client.commit_sync(opts.group_id, offsets, never_backwards=True)
        committed = client.committed(opts.group_id, list(offsets))
    finally:
        client.close()
    ahead = {tp: committed[tp] for tp in offsets if committed.get(tp, -1) > offsets[tp]}
    if ahead:
        raise KafkaConfigurationError(
            f"consumer group {opts.group_id!r} has committed offsets beyond the savepoint's batch {batch_id} "
            f"({fmt_offsets(ahead)}; the batch ends at {fmt_offsets(offsets)}): another consumer used the group, and a "
            f"new query in group mode would skip records. Start the new query with startingOffsets="
            f"savepoint.starting_offsets() instead, or reset the group")
    log.info("savepoint of batch %d: consumer group %r now resumes at %s", batch_id, opts.group_id,
             fmt_offsets(offsets))
    return {"group_id": opts.group_id, "batch_id": batch_id, "offsets": to_offset_json(offsets)}
