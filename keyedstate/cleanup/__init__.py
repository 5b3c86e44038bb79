"""Removing what a stopped streaming query left behind: RocksDB mode's state storage and local databases, and the
exactly-once Kafka sink's progress-marker consumer groups (docs/operations.md, "Cleaning up after a stopped query").

Also on the command line: ``python -m keyedstate cleanup CHECKPOINT [--state-storage URI] [--bootstrap-servers
HOSTS] [--dry-run] [--force]``.
"""

from keyedstate.cleanup.query import DEFAULT_IDLE_SECONDS, clean_up_query
from keyedstate.cleanup.report import CleanupItem, CleanupReport

__all__ = ["clean_up_query", "CleanupReport", "CleanupItem", "DEFAULT_IDLE_SECONDS"]
