"""Every PySpark version difference keyedstate depends on, in one place.

keyedstate.spark sticks to APIs PySpark 3.5 already has (applyInPandasWithState, xxhash64, pmod, unix_millis,
GroupState); where 4.x differs, the difference is handled here.
"""

from __future__ import annotations

from typing import Any, Optional

import pyspark

__all__ = [
    "PYSPARK_VERSION",
    "current_batch_id",
    "current_query_id",
    "current_run_id",
    "task_partition_id",
    "task_attempt_number",
    "shuffle_partitions",
    "watermark_or_none",
    "GROUP_STATE_TIMEOUT",
]

PYSPARK_VERSION = tuple(int(part) for part in pyspark.__version__.split(".")[:2])


def _group_state_timeout() -> Any:
    from pyspark.sql.streaming.state import GroupStateTimeout

    return GroupStateTimeout


GROUP_STATE_TIMEOUT = _group_state_timeout()


def current_batch_id() -> Optional[int]:
    """The micro-batch id of the running task (None outside a streaming task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    value = context.getLocalProperty("streaming.sql.batchId")
    return int(value) if value not in (None, "") else None


def current_query_id() -> Optional[str]:
    """The id of the running streaming query (stable across restarts from its checkpoint), or None."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    return context.getLocalProperty("sql.streaming.queryId") or None


def current_run_id() -> Optional[str]:
    """The id of this run of the streaming query (new at every start; Spark makes it the job group of the
    query's jobs), or None."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    return context.getLocalProperty("spark.jobGroup.id") or None


def task_partition_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def task_attempt_number() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def shuffle_partitions(df: Any) -> int:
    """``spark.sql.shuffle.partitions`` of the session ``df`` belongs to (the stateful operator's partitions)."""
    return int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))


def watermark_or_none(group_state: Any) -> Optional[int]:
    """Spark's current watermark, or None when the query has none (getCurrentWatermarkMs raises then)."""
    try:
        return int(group_state.getCurrentWatermarkMs())
    except Exception:  # PySparkRuntimeError in 3.5 and 4.x alike; the class moved between versions
        return None
