"""The checkpoint inspector: what one committed batch of a keyed_process query holds, for either state backend.

The key-group rows are read with Spark's state data source (as :func:`read_keyed_state_frame` reads them) and
sized per key in the executors (:mod:`keyedstate.spark.state_sizes`); Spark aggregates that frame, and the driver
collects only aggregates: one row per key group, per state name, per histogram bin, and the ``top_keys`` largest
keys. The driver's memory therefore does not grow with the number of keys. Also ``python -m keyedstate inspect``.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Optional

from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.cleanup.spark_checkpoint import SparkCheckpoint
from keyedstate.errors import CheckpointNotInspectableError, ConfigurationError, SnapshotError
from keyedstate.redaction import without_credentials
from keyedstate.spark.inspection_report import (
    KeyedStateInspection,
    KeyGroupSummary,
    LargestKey,
    StateSummary,
    StorageSummary,
    TimerSummary,
)
from keyedstate.spark.state_sizes import key_group_storage_frame, key_sizes_frame
from keyedstate.spark_compat import state_rows_frame
from keyedstate.state.base.kinds import HEAP, ROCKSDB
from keyedstate.state.key_groups.row_format import STATE_ROW_FORMAT_ROCKSDB

__all__ = ["inspect_keyed_state", "FAR_FUTURE_MS"]

logger = logging.getLogger("keyedstate.spark.inspection")

FAR_FUTURE_MS = 253_402_300_800_000
"""Year 10000: timers due later (Long.MAX_VALUE ones) are counted, not put in the histogram's bins."""

_STATE_ROW_COLUMNS = ["format", "key_groups", "state", "timers", "base_snapshot", "tag"]


def inspect_keyed_state(
    spark: Any,
    checkpoint_location: str,
    *,
    batch_id: Optional[int] = None,
    operator_id: int = 0,
    state_storage: Optional[str] = None,
    state_storage_options: Optional[Mapping[str, Any]] = None,
    checkpoint_options: Optional[Mapping[str, Any]] = None,
    top_keys: int = 10,
    histogram_bins: int = 20,
    list_storage: bool = True,
) -> KeyedStateInspection:
    """What batch ``batch_id`` (default: the last committed one) of a keyed_process checkpoint holds: keys, key
    groups, state bytes per state name, pending timers (next due time, a histogram of ``histogram_bins`` bins by due
    time), the ``top_keys`` keys with the most state bytes, and the bytes in Spark's state rows and, in RocksDB mode,
    in the bases and changelogs the key groups' versions name. Aggregated in Spark; the driver collects only the
    aggregates, so it runs in bounded memory for any number of keys.

    ``state_storage``, ``state_storage_options`` as for :func:`read_keyed_state_frame`. ``checkpoint_options``: the
    storage options (``pyarrow.fs``, as ``state_storage_options``) for reading the checkpoint's commit and offset
    logs from the driver when the location is on S3; Spark reads the state rows with its own (Hadoop) settings.
    ``list_storage``: also list the RocksDB-mode state storage location(s) for the bytes of every retained version.
    Raises :class:`~keyedstate.errors.CheckpointNotInspectableError` when there is no committed batch, batch
    ``batch_id`` is not retained, or the checkpoint holds no keyed_process state."""
    if top_keys < 0 or histogram_bins < 1:
        raise ConfigurationError(f"inspect_keyed_state: top_keys must be >= 0 and histogram_bins >= 1, got "
                                 f"{top_keys} and {histogram_bins}")
    shown = without_credentials(checkpoint_location)
    batch_id, times = _batch_of(checkpoint_location, shown, batch_id, operator_id, checkpoint_options)
    rows = state_rows_frame(spark, checkpoint_location, operator_id, batch_id, "inspect_keyed_state")
    if rows.columns != _STATE_ROW_COLUMNS:
        raise CheckpointNotInspectableError(
            f"{shown}: operator {operator_id}'s state rows have the columns {rows.columns}, not keyed_process's "
            f"{_STATE_ROW_COLUMNS}: not a keyed_process checkpoint (or pass the operator_id of keyed_process)")
    logger.info("inspecting %s batch %s: reading the key-group rows", shown,
                batch_id if batch_id is not None else "(last committed)")
    storage_rows = key_group_storage_frame(rows).collect()
    keys = key_sizes_frame(rows, state_storage, state_storage_options)
    from pyspark import StorageLevel

    keys = keys.persist(StorageLevel.MEMORY_AND_DISK)  # several aggregations read it; decode the state once
    try:
        logger.info("inspecting %s: sizing every key (the first aggregation decodes the state)", shown)
        groups = _key_groups(keys, storage_rows)
        logger.info("inspecting %s: %d key groups hold state; aggregating states and timers", shown, len(groups))
        states = _states(keys)
        timers = _timers(keys, histogram_bins, *times)
        largest = _largest_keys(keys, top_keys)
        histogram = _key_bytes_histogram(keys)
    finally:
        keys.unpersist()
    formats = {row["format"] for row in storage_rows}
    backend = ROCKSDB if STATE_ROW_FORMAT_ROCKSDB in formats else (HEAP if formats else "empty")
    return KeyedStateInspection(
        checkpoint=shown, batch_id=batch_id, backend=backend,
        num_key_groups=max((row["num_key_groups"] for row in storage_rows), default=None),
        keys=sum(group.keys for group in groups), state_bytes=sum(group.state_bytes for group in groups),
        states=states, timers=timers, key_groups=groups, largest_keys=largest, key_bytes_histogram=histogram,
        storage=_storage(storage_rows, state_storage, state_storage_options, list_storage),
        watermark_ms=times[0], batch_timestamp_ms=times[1])


def _batch_of(location: str, shown: str, batch_id: Optional[int], operator_id: int,
              options: Optional[Mapping[str, Any]]) -> tuple[Optional[int], tuple[Optional[int], Optional[int]]]:
    """The batch to read and its (watermark, timestamp), checked against the checkpoint's logs. A location the
    driver cannot open (a scheme pyarrow does not know) is left to Spark: (batch_id, (None, None))."""
    try:
        checkpoint = SparkCheckpoint(location, options)
        present = checkpoint.storage.exists()
    except (ConfigurationError, SnapshotError) as error:
        logger.info("the commit log of %s is not readable from the driver (%s); Spark reads the state", shown, error)
        return batch_id, (None, None)
    storage = checkpoint.storage
    if not present or not storage.exists("metadata"):
        raise CheckpointNotInspectableError(
            f"{shown} is not a Spark checkpoint (it has no 'metadata' file); pass the checkpointLocation the query "
            f"ran with")
    committed = checkpoint.batch_ids()
    if not committed:
        raise CheckpointNotInspectableError(
            f"{shown} has no committed batch yet (commits/ is empty): nothing to inspect until the query's first "
            f"batch commits")
    if batch_id is None:
        batch_id = committed[-1]
    elif batch_id not in committed:
        where = "is not committed yet" if batch_id > committed[-1] else "is not retained any more"
        raise CheckpointNotInspectableError(
            f"batch {batch_id} of {shown} {where}: the checkpoint keeps committed batches {committed[0]} to "
            f"{committed[-1]} (Spark keeps spark.sql.streaming.minBatchesToRetain of them)")
    if not storage.exists(f"state/{operator_id}"):
        raise CheckpointNotInspectableError(
            f"{shown} has no state of operator {operator_id} (no state/{operator_id}/): not a keyed_process "
            f"checkpoint, or pass the operator_id of keyed_process")
    return batch_id, _batch_times(checkpoint, batch_id)


def _batch_times(checkpoint: SparkCheckpoint, batch_id: int) -> tuple[Optional[int], Optional[int]]:
    """(watermark, timestamp) of the batch from Spark's metadata line of ``offsets/<batch>``."""
    try:
        _, metadata = checkpoint.batch_offsets(batch_id)
        return int(metadata["batchWatermarkMs"]), int(metadata["batchTimestampMs"])
    except (SnapshotError, ValueError, KeyError, IndexError, TypeError) as error:
        logger.info("no watermark for batch %d (offsets/%d: %r)", batch_id, batch_id, error)
        return None, None


def _key_groups(keys: Any, storage_rows: list[Any]) -> tuple[KeyGroupSummary, ...]:
    from pyspark.sql import functions as F

    rows = keys.groupBy("key_group").agg(F.count(F.lit(1)).alias("keys"), F.sum("state_bytes").alias("bytes"),
                                         F.sum(F.size("timers")).alias("timers")).collect()
    stored = {row["key_group"]: row for row in storage_rows}
    groups = []
    for row in sorted(rows, key=lambda r: r["key_group"]):
        kept = stored.get(row["key_group"])
        sizes = {} if kept is None else {name: kept[name] for name in (
            "row_bytes", "base_bytes", "changelog_bytes", "changelogs")}
        groups.append(KeyGroupSummary(key_group=row["key_group"], keys=row["keys"], state_bytes=row["bytes"] or 0,
                                      timers=row["timers"] or 0, **sizes))
    return tuple(groups)


def _states(keys: Any) -> tuple[StateSummary, ...]:
    from pyspark.sql import functions as F

    rows = (keys.select(F.explode("states").alias("s")).groupBy(F.col("s.state").alias("state"))
            .agg(F.count(F.lit(1)).alias("keys"), F.sum("s.entries").alias("entries"), F.sum("s.bytes").alias("bytes"))
            .collect())
    return tuple(StateSummary(row["state"], row["keys"], row["entries"], row["bytes"])
                 for row in sorted(rows, key=lambda r: (-r["bytes"], r["state"])))


def _timers(keys: Any, bins: int, watermark_ms: Optional[int],
            batch_timestamp_ms: Optional[int]) -> tuple[TimerSummary, ...]:
    from pyspark.sql import functions as F

    timers = keys.select(F.explode("timers").alias("t")).select("t.domain", "t.timestamp")
    thresholds = {"event_time": watermark_ms, "processing_time": batch_timestamp_ms}
    due = F.lit(None)
    for domain, threshold in thresholds.items():
        if threshold is not None:
            due = F.when(F.col("domain") == domain, (F.col("timestamp") <= threshold).cast("long")).otherwise(due)
    near = F.col("timestamp") < FAR_FUTURE_MS
    bounds = (timers.groupBy("domain").agg(
        F.count(F.lit(1)).alias("count"), F.min("timestamp").alias("next"), F.max("timestamp").alias("last"),
        F.min(F.when(near, F.col("timestamp"))).alias("first_near"),
        F.max(F.when(near, F.col("timestamp"))).alias("last_near"),
        F.sum(F.when(near, 0).otherwise(1)).alias("far"), F.sum(due).alias("due")).collect())
    if not bounds:
        return ()
    # equal-width bins over the timers before FAR_FUTURE_MS (a Long.MAX_VALUE timer would squeeze the rest into one)
    binned = [row for row in bounds if row["first_near"] is not None]
    widths = {row["domain"]: max(1, math.ceil((row["last_near"] - row["first_near"] + 1) / bins)) for row in binned}
    firsts = {row["domain"]: row["first_near"] for row in binned}
    bin_of = F.lit(None).cast("long")
    for domain, width in widths.items():
        bin_of = F.when((F.col("domain") == domain) & near,
                        F.expr(f"(timestamp - {firsts[domain]}L) div {width}L")).otherwise(bin_of)
    counts: dict[str, dict[int, int]] = {}
    if binned:
        for row in timers.where(near).groupBy("domain", bin_of.alias("bin")).count().collect():
            counts.setdefault(row["domain"], {})[row["bin"]] = row["count"]
    summaries = []
    for row in sorted(bounds, key=lambda r: r["domain"]):
        domain = row["domain"]
        histogram: tuple[tuple[int, int, int], ...] = ()
        if domain in widths:
            first, width = firsts[domain], widths[domain]
            histogram = tuple((first + b * width, first + (b + 1) * width, counts.get(domain, {}).get(b, 0))
                              for b in range((row["last_near"] - first) // width + 1))
        summaries.append(TimerSummary(domain, row["count"], row["next"], row["last"],
                                      None if thresholds[domain] is None else int(row["due"] or 0), histogram,
                                      far_future=int(row["far"] or 0)))
    return tuple(summaries)


def _largest_keys(keys: Any, top: int) -> tuple[LargestKey, ...]:
    from pyspark.sql import functions as F

    if top == 0:
        return ()
    rows = (keys.orderBy(F.desc("state_bytes"), "key_group", "key").limit(top)
            .select("key", "key_group", "state_bytes",
                    F.expr("aggregate(states, 0L, (total, s) -> total + s.entries)").alias("entries"),
                    F.size("timers").alias("timers"))
            .collect())
    return tuple(LargestKey(row["key"], row["key_group"], row["state_bytes"], row["entries"], row["timers"])
                 for row in rows)


def _key_bytes_histogram(keys: Any) -> tuple[tuple[int, int, int], ...]:
    from pyspark.sql import functions as F

    # bucket b holds keys of [2**b, 2**(b+1)) bytes; -1 keys with timers only
    bucket = F.when(F.col("state_bytes") > 0, F.floor(F.log2("state_bytes"))).otherwise(F.lit(-1)).cast("int")
    rows = keys.groupBy(bucket.alias("bucket")).count().collect()
    return tuple((0 if row["bucket"] < 0 else 1 << row["bucket"], 1 if row["bucket"] < 0 else 2 << row["bucket"],
                  row["count"]) for row in sorted(rows, key=lambda r: r["bucket"]))


def _storage(storage_rows: list[Any], state_storage: Optional[str], options: Optional[Mapping[str, Any]],
             list_storage: bool) -> StorageSummary:
    row_bytes = sum(row["row_bytes"] for row in storage_rows)
    versions = [row for row in storage_rows if row["format"] == STATE_ROW_FORMAT_ROCKSDB]
    if not versions:
        return StorageSummary(row_bytes=row_bytes)
    locations = tuple(sorted({state_storage or row["location"] for row in versions if row["location"]}))
    files = stored = None
    if list_storage and locations:
        try:
            sizes = [CheckpointStorage(location, options=options, create=False).sizes() for location in locations]
            files, stored = sum(count for count, _ in sizes), sum(size for _, size in sizes)
        except (ConfigurationError, SnapshotError, OSError) as error:
            logger.warning("could not list the state storage %s: %s", ", ".join(locations), error)
    return StorageSummary(
        row_bytes=row_bytes, base_bytes=sum(row["base_bytes"] or 0 for row in versions),
        changelog_bytes=sum(row["changelog_bytes"] or 0 for row in versions),
        changelogs=sum(row["changelogs"] or 0 for row in versions),
        locations=tuple(without_credentials(location) for location in locations),
        stored_files=files, stored_bytes=stored)
