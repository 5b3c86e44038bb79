"""Every PySpark version (and Spark Connect) difference keyedstate depends on, in one place.

keyedstate.spark sticks to APIs PySpark 3.5 already has (applyInPandasWithState, xxhash64, pmod, unix_millis,
GroupState); where 4.x or a Spark Connect session differs, the difference is handled here. docs/operations.md has
the support matrix these checks implement. It lives outside :mod:`keyedstate.spark` because the Kafka connector
needs the version gate in every process Spark starts for it, without loading the operator, timers and RocksDB.
"""

from __future__ import annotations

import gc
from typing import Any, Optional

import pyspark
from pyspark.sql.streaming.state import GroupStateTimeout

from keyedstate.errors import UnsupportedSparkVersionError

__all__ = ["PYSPARK_VERSION", "current_batch_id", "current_query_id", "current_run_id", "task_partition_id",
           "task_attempt_number", "shuffle_partitions", "watermark_or_none", "GROUP_STATE_TIMEOUT",
           "STATE_DATA_SOURCE", "PYTHON_STREAMING_READ_LIMITS", "require_spark", "check_arrow", "read_state_rows",
           "is_connect_session", "freeze_worker_startup_objects"]

PYSPARK_VERSION = tuple(int(part) for part in pyspark.__version__.split(".")[:2])

#: ``spark.read.format("statestore")`` (Spark's state data source).
STATE_DATA_SOURCE = (4, 0)
#: ``pyspark.sql.streaming.datasource`` (read limits and Trigger.AvailableNow for Python streaming readers).
PYTHON_STREAMING_READ_LIMITS = (4, 2)

# The first pyarrow each Spark line breaks with (PySpark 3.5's Arrow serializer fails inside applyInPandasWithState
# with pyarrow 26); the spark35 extra of pyproject.toml pins below it.
_PYARROW_BREAKS: dict[tuple[int, ...], tuple[int, ...]] = {(3, 5): (26, 0)}
_EXTRA_OF_LINE: dict[tuple[int, ...], str] = {(3, 5): "spark35"}


def _version_text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def require_spark(minimum: tuple[int, int], feature: str, alternative: str = "") -> None:
    """Raise :class:`UnsupportedSparkVersionError` unless the installed PySpark is at least ``minimum``."""
    if PYSPARK_VERSION >= minimum:
        return
    raise UnsupportedSparkVersionError(
        f"{feature} needs Spark {_version_text(minimum)} or newer, and this is PySpark {pyspark.__version__}. "
        f"Upgrade (pip install 'pyspark>={_version_text(minimum)}', or a runtime with Spark "
        f"{_version_text(minimum)}+){'; ' + alternative if alternative else ''}. The support matrix is in "
        f"docs/operations.md"
    )


def check_arrow() -> None:
    """Refuse a pyarrow the installed PySpark breaks with, naming the versions that work."""
    import pyarrow

    below = _PYARROW_BREAKS.get(PYSPARK_VERSION)
    arrow = tuple(int(part) for part in pyarrow.__version__.split(".")[:2])
    if below is not None and arrow >= below:
        raise UnsupportedSparkVersionError(
            f"PySpark {pyspark.__version__} does not work with pyarrow {pyarrow.__version__} (its Arrow serializer "
            f"fails inside applyInPandasWithState); install pyarrow<{_version_text(below)}, e.g. pip install "
            f"'keyedstate[{_EXTRA_OF_LINE[PYSPARK_VERSION]}]', which pins a working set (docs/operations.md)"
        )


def arrow_type_of(spark_type: Any) -> Any:
    """The pyarrow type PySpark converts ``spark_type`` to, for checking output values before PySpark does.

    PySpark 4 asserts that a TIMESTAMP is given a time zone; 3.5 takes none and uses UTC. A zone only changes how
    the values are labelled, not which values convert, so UTC serves the check in both."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_type

    if "timezone" in inspect.signature(to_arrow_type).parameters:
        return to_arrow_type(spark_type, timezone="UTC")
    return to_arrow_type(spark_type)


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` (a session, or a DataFrame's) is a Spark Connect client session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


GROUP_STATE_TIMEOUT: Any = GroupStateTimeout


def _task_property(name: str) -> Optional[str]:
    from pyspark import TaskContext

    context = TaskContext.get()
    return None if context is None else context.getLocalProperty(name)


def current_batch_id() -> Optional[int]:
    """The micro-batch id of the running task (None outside a streaming task)."""
    value = _task_property("streaming.sql.batchId")
    return int(value) if value not in (None, "") else None


def current_query_id() -> Optional[str]:
    """The id of the running streaming query (stable across restarts from its checkpoint), or None."""
    return _task_property("sql.streaming.queryId") or None


def current_run_id() -> Optional[str]:
    """The id of this run of the streaming query (new at every start; Spark makes it the job group of the
    query's jobs), or None."""
    return _task_property("spark.jobGroup.id") or None


def task_partition_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


_worker_objects_frozen = False


def freeze_worker_startup_objects() -> None:
    """In a Spark Python worker, take the objects alive now out of every later garbage collection; once per process.

    PySpark's worker daemon runs a full collection after every task a reused worker finishes (pyspark/daemon.py), and
    applyInPandasWithState runs two Python passes per task (its elements, then its timed-out groups). A full
    collection visits every tracked object of the process, which in a worker are mostly the modules of pyspark,
    pandas, numpy and keyedstate: about 90,000 objects and 70 ms per collection on the benchmark machine, eight
    collections per micro-batch with 4 shuffle partitions, a third of the workers' time at 10,000 events/s. Those
    objects live as long as the worker. So, after one collection that frees what is garbage now, ``gc.freeze()``
    moves them to the permanent generation, which collections skip; reference counting still frees them (only a
    reference cycle among them would outlive the worker). Outside a Spark task (the driver, a test calling a group
    function) nothing changes: that process's collections are not keyedstate's to change."""
    global _worker_objects_frozen
    if _worker_objects_frozen:
        return
    from pyspark import TaskContext

    if TaskContext.get() is None:
        return
    _worker_objects_frozen = True
    gc.collect()
    gc.freeze()


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


def state_rows_frame(spark: Any, checkpoint_location: str, operator_id: int, batch_id: Optional[int],
                     feature: str) -> Any:
    """The state rows of a flatMapGroupsWithState-like operator as of ``batch_id`` (default: the last committed
    batch) as a DataFrame with the columns ``format, key_groups, state, timers, base_snapshot, tag`` (all null for
    a removed state): Spark's state data source, Spark 4.0+."""
    require_spark(STATE_DATA_SOURCE, feature, "on Spark 3.5, read_keyed_state reads the state into the driver")
    reader = spark.read.format("statestore").option("operatorId", operator_id)
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    frame = reader.load(checkpoint_location)
    # Spark's state format 2 nests the user's state row as value.groupState next to the timeout.
    column = "value.groupState" if "groupState" in frame.schema["value"].dataType.fieldNames() else "value"
    return frame.select(f"{column}.*")


def read_state_rows(spark: Any, checkpoint_location: str, operator_id: int, batch_id: Optional[int]) -> list[Any]:
    """The state rows (``format, key_groups, state, timers, base_snapshot, tag``; None for a removed state) of a
    flatMapGroupsWithState-like operator as of ``batch_id`` (default: the last committed batch), on the driver.

    Spark 4.0+ has the state data source; on 3.5 (classic sessions only) the state store is read through Spark's
    own state store provider classes, so every provider and its file format are read by Spark itself."""
    if PYSPARK_VERSION >= STATE_DATA_SOURCE:
        rows = state_rows_frame(spark, checkpoint_location, operator_id, batch_id, "read_keyed_state").collect()
        return [None if row[0] is None else row for row in rows]
    if is_connect_session(spark):
        require_spark(STATE_DATA_SOURCE, "read_keyed_state through Spark Connect",
                      "on Spark 3.5, read the checkpoint from a classic (non-Connect) SparkSession")
    from keyedstate.spark.jvm_state_store import read_group_state_rows

    return read_group_state_rows(spark, checkpoint_location, operator_id, batch_id)
