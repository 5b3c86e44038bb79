"""Savepoints: a self-contained, versioned copy of a keyed_process query's keyed state and pending timers as of one
committed batch, to start a new query from (Flink's "stop with savepoint" and "run -s").

A savepoint is a bootstrap directory (one storage format: :mod:`keyedstate.state.key_groups.initial_state`), so a
new query starts from it with ``keyed_process(..., initial_state=savepoint)`` and a new checkpoint location. Its
``_bootstrap.json`` also carries a ``savepoint`` section: the batch, query id, uid, the source's redacted location,
the query's recorded settings, each source's end offsets of that batch, and the consumer-group commits
:func:`stop_with_savepoint` made.

It is written by a Spark batch job that never collects state to the driver:

1. the source's key groups are read in the executors (a checkpoint's rows through Spark's state data source, or a
   savepoint's row files) and decoded into raw records without the function's descriptors
   (:mod:`keyedstate.spark.savepoint_records`); each key goes to its key group of the *target* query, whose
   ``num_key_groups`` and ``state_backend`` may differ from the source's;
2. the records are partitioned and sorted by target key group, and each key group's row file is written in the
   target backend's format (:mod:`keyedstate.spark.savepoint_writer`);
3. the driver writes ``_bootstrap.json`` last: a savepoint without it (an interrupted write) is refused.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

import pyspark

from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import validate_num_key_groups
from keyedstate.redaction import redact_uri
from keyedstate.spark.savepoint_records import CHUNK_SCHEMA, SourceDecoder
from keyedstate.spark.savepoint_source import (
    SavepointSource,
    checkpoint_source,
    directory_source,
    is_savepoint_directory,
)
from keyedstate.spark.savepoint_writer import RESULT_SCHEMA, TargetWriter
from keyedstate.state.base.kinds import STATE_BACKENDS
from keyedstate.state.key_groups.initial_state import (
    BOOTSTRAP_MANIFEST,
    KeyedStateBootstrap,
    new_bootstrap_storage,
    read_bootstrap_manifest,
    write_bootstrap_manifest,
)

__all__ = ["Savepoint", "write_savepoint", "stop_with_savepoint", "read_savepoint"]

logger = logging.getLogger("keyedstate.spark.savepoints")

_SECTION_FORMAT = 1


@dataclass(frozen=True)
class Savepoint(KeyedStateBootstrap):
    """What :func:`write_savepoint` / :func:`stop_with_savepoint` wrote; pass it (or its ``path``) to
    ``keyed_process(..., initial_state=...)`` of a new query with a new checkpoint location.

    ``batch_id``, ``query_id`` and ``uid``: the committed batch, query and operator the state is from.
    ``source_offsets``: each source's end offsets of that batch (next offset to read) from Spark's offsets log, in
    the query's source order; for the keyedstate-kafka source and Spark's Kafka source
    ``{"topic": {"0": 42, ...}}`` (None for a source without offsets). :meth:`starting_offsets` gives one as the
    ``startingOffsets`` option of a new query. ``kafka_group_commits``: the consumer-group offsets
    :func:`stop_with_savepoint` committed (group id and offsets). ``records``, ``timers`` and ``size_bytes``:
    state entries, pending timers and bytes of row files written."""

    batch_id: Optional[int] = None
    query_id: Optional[str] = None
    uid: Optional[str] = None
    source_offsets: tuple[Optional[Mapping[str, Any]], ...] = ()
    kafka_group_commits: tuple[Mapping[str, Any], ...] = ()
    records: int = 0
    timers: int = 0
    size_bytes: int = 0

    def starting_offsets(self, source_index: int = 0) -> str:
        """Source ``source_index``'s end offsets of the savepoint's batch as JSON for
        ``.option("startingOffsets", ...)``: a new query that reads explicit offsets resumes at the next record."""
        if not 0 <= source_index < len(self.source_offsets) or self.source_offsets[source_index] is None:
            raise ConfigurationError(f"the savepoint at {redact_uri(self.path)} has no offsets for source "
                                     f"{source_index} (it has {len(self.source_offsets)} source(s))")
        return json.dumps(self.source_offsets[source_index], sort_keys=True)


def read_savepoint(path: str, storage_options: Optional[Mapping[str, Any]] = None) -> Savepoint:
    """The savepoint :func:`write_savepoint` wrote at ``path`` (refused when the write did not finish)."""
    options = StorageOptions.parse(storage_options)
    body = read_bootstrap_manifest(os.fspath(path), options)
    if body is None or "savepoint" not in body:
        raise ConfigurationError(
            f"{redact_uri(os.fspath(path))!r} holds no savepoint: {BOOTSTRAP_MANIFEST} is missing (a write_savepoint "
            f"that was interrupted writes none; write the savepoint again)" if body is None else
            f"{redact_uri(os.fspath(path))!r} holds a bootstrap, not a savepoint; pass it to initial_state directly")
    return _savepoint_of(os.fspath(path), body, options)


def _savepoint_of(path: str, body: Mapping[str, Any], options: Optional[StorageOptions]) -> Savepoint:
    section = body["savepoint"]
    return Savepoint(
        path, str(body["bootstrap_id"]), str(body["state_backend"]), int(body["num_key_groups"]),
        tuple((str(name), str(kind)) for name, kind in body["key_columns"]), len(body["rows"]), options,
        batch_id=section.get("batch_id"), query_id=section.get("query_id"), uid=section.get("uid"),
        source_offsets=tuple(section.get("source_offsets") or ()),
        kafka_group_commits=tuple(section.get("kafka_group_commits") or ()),
        records=int(section.get("records", 0)), timers=int(section.get("timers", 0)),
        size_bytes=int(section.get("size_bytes", 0)))


def write_savepoint(
    spark: Any,
    source: Union[str, "os.PathLike[str]", KeyedStateBootstrap],
    path: str,
    *,
    batch_id: Optional[int] = None,
    operator_id: int = 0,
    uid: Optional[str] = None,
    num_key_groups: Optional[int] = None,
    state_backend: Optional[str] = None,
    key_schema: Any = None,
    initial_state: Optional[Union[str, KeyedStateBootstrap]] = None,
    state_storage: Optional[str] = None,
    state_storage_options: Optional[Mapping[str, Any]] = None,
    savepoint_storage_options: Optional[Mapping[str, Any]] = None,
    state_local_dir: Optional[str] = None,
    _kafka_group_commits: tuple[Mapping[str, Any], ...] = (),
) -> Savepoint:
    """Write a savepoint of a keyed_process (or keyed_co_process) query to ``path`` and return it; a new query
    starts from it with ``keyed_process(..., initial_state=savepoint)`` and a new checkpoint location.

    * ``source``: the query's checkpoint location (stopped or running: only committed data is read), or a savepoint
      or bootstrap directory (or what wrote it) to write again for other target settings. From a checkpoint:
      ``batch_id`` (default: the last committed batch) and ``operator_id`` (the stateful operator's index, 0 for a
      query with one) choose the state; ``state_storage`` / ``state_storage_options`` are the query's (where its
      settings record and RocksDB files are; default as keyed_process's) and ``uid`` its operator's uid (needed
      only when several operators recorded settings there). A query started from ``initial_state`` needs it again
      here: key groups that have not run yet still hold only that state. Without a settings record, pass
      ``key_schema`` (the key columns, e.g. ``"user STRING"``), ``num_key_groups`` and ``state_backend``.
    * ``num_key_groups`` and ``state_backend`` (``"heap"`` or ``"rocksdb"``) are the *new* query's (default: the
      source's): state is re-distributed by key over the new key groups, and written in the new backend's format.
    * ``path``: a local path or ``pyarrow.fs`` URI (``s3://...``) the new query's executors can read, configured by
      ``savepoint_storage_options`` (as keyed_process's ``state_storage_options``); it must not hold a savepoint
      or bootstrap yet. Keep it as long as a checkpoint started from it lives. ``state_local_dir``: where executors
      build the RocksDB databases of a ``rocksdb`` savepoint (default: Spark's local directory).

    Timers, TTL timestamps and states no longer registered are copied as they are. Spark 4.0+ reads a checkpoint
    (its state data source); a savepoint written there starts queries on Spark 3.5 too.
    """
    started = time.monotonic()
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ConfigurationError(f"path must be a path or URI string, got {path!r}")
    path = os.fspath(path)
    if state_backend is not None and state_backend not in STATE_BACKENDS:
        raise ConfigurationError(f"state_backend must be one of {', '.join(map(repr, STATE_BACKENDS))}, got "
                                 f"{state_backend!r}")
    if num_key_groups is not None:
        validate_num_key_groups(num_key_groups)
    source_options = StorageOptions.parse(state_storage_options)
    target_options = StorageOptions.parse(savepoint_storage_options)
    storage = new_bootstrap_storage(path, target_options)
    if not isinstance(source, (str, os.PathLike, KeyedStateBootstrap)):
        raise ConfigurationError(f"source must be a checkpoint location or a savepoint path (or a Savepoint), got "
                                 f"{type(source).__qualname__}")
    if isinstance(source, KeyedStateBootstrap) or is_savepoint_directory(os.fspath(source), source_options):
        found: SavepointSource = directory_source(spark, source, source_options, key_schema)
    else:
        found = checkpoint_source(spark, os.fspath(source), batch_id=batch_id, operator_id=operator_id, uid=uid,
                                  state_storage=state_storage, options=source_options, key_schema=key_schema,
                                  initial_state=initial_state, state_backend=state_backend,
                                  num_key_groups=num_key_groups)
    target_groups = num_key_groups if num_key_groups is not None else found.num_key_groups
    if target_groups is None:
        raise ConfigurationError("the source query grouped by the user key (num_key_groups=None); pass the new "
                                 "query's num_key_groups= (a savepoint starts queries with key groups)")
    target_backend = state_backend or found.state_backend
    chunks = None
    for kind, frame, location, options in found.parts:
        decoder = SourceDecoder(kind, found.key_types, found.num_key_groups, target_groups, location, options,
                                state_local_dir, _live_states(found.section))
        part = frame.mapInPandas(decoder, CHUNK_SCHEMA)
        chunks = part if chunks is None else chunks.unionByName(part)
    results: list[Any] = []
    if chunks is not None:
        partitions = max(1, min(target_groups, int(spark.conf.get("spark.sql.shuffle.partitions"))))
        writer = TargetWriter(path, target_options, target_backend, target_groups, state_local_dir)
        written = (chunks.repartition(partitions, "key_group").sortWithinPartitions("key_group")
                   .mapInPandas(writer, RESULT_SCHEMA))
        results = written.collect()  # one small row per key group: its row file's name, size and checksum
    rows = {int(row["key_group"]): FileEntry.from_json(json.loads(row["entry"])) for row in results}
    section = {
        "format": _SECTION_FORMAT, **found.section, "key_types": list(found.key_types),
        "records": sum(int(row["records"]) for row in results), "timers": sum(int(row["timers"]) for row in results),
        "size_bytes": sum(entry.size for entry in rows.values()),
        "kafka_group_commits": list(_kafka_group_commits) or found.section.get("kafka_group_commits") or [],
        "keyedstate_format": 1, "spark_version": pyspark.__version__, "written_at_ms": time.time_ns() // 1_000_000,
    }
    bootstrap = KeyedStateBootstrap(path, uuid.uuid4().hex, target_backend, target_groups,
                                    tuple(zip(found.key_names, found.key_types)), len(rows), target_options)
    write_bootstrap_manifest(storage, bootstrap, f"savepoint of {found.section.get('uid') or 'keyed_process'}", rows,
                             section["written_at_ms"], savepoint=section)
    savepoint = read_savepoint(path, savepoint_storage_options)
    logger.info("wrote savepoint %s of batch %s (%d key groups, %d records, %d timers, %d bytes) in %.1f s",
                redact_uri(path), section.get("batch_id"), len(rows), savepoint.records, savepoint.timers,
                savepoint.size_bytes, time.monotonic() - started)
    return savepoint


def stop_with_savepoint(
    query: Any,
    path: str,
    *,
    checkpoint_location: Optional[str] = None,
    spark: Any = None,
    kafka_source_options: Optional[Mapping[str, str]] = None,
    kafka_source_index: Optional[int] = None,
    stop_timeout_seconds: float = 120.0,
    **options: Any,
) -> Savepoint:
    """Flink's "stop with savepoint": stop the running ``query`` between two batches, then write a savepoint of its
    last committed batch to ``path`` (:func:`write_savepoint`'s keyword arguments apply, e.g. ``num_key_groups=``,
    ``state_backend=``, ``state_storage=``, ``initial_state=``).

    * ``checkpoint_location``: the query's; read from the query when not given (classic Spark sessions).
      ``spark``: the session to write the savepoint with (default: the active one).
    * ``kafka_source_options``: the options of the query's keyedstate-kafka source in consumer-group mode
      (``group.id``; ``commitOffsets`` on). The source commits a batch's offsets to the group only when the next
      batch starts, so after a stop the group is behind. The savepoint's batch end offsets are committed to the
      group here (never moving it backwards), so a new query in group mode (``startingOffsets=group``) resumes at
      the next record; a group already beyond them is refused. ``kafka_source_index``: which of several sources.
    * The stop waits up to ``stop_timeout_seconds`` for the running batch to end. A query stopped inside a batch
      (its batch was started but not committed) is refused: that batch's outputs may be partly written, and a new
      query would write them again. Restart it on its checkpoint (the batch completes exactly once) and stop again.
    """
    checkpoint = checkpoint_location or _checkpoint_of(query)
    _stop_between_batches(query, stop_timeout_seconds)
    spark = spark if spark is not None else _session_of(query)
    from keyedstate.cleanup.spark_checkpoint import SparkCheckpoint

    found = SparkCheckpoint(checkpoint)
    committed, started = found.batch_ids(), found.batch_ids("offsets")
    if not committed:
        raise ConfigurationError(f"query {query.id} committed no batch before it stopped: there is no state to save")
    if started and started[-1] > committed[-1]:
        raise ConfigurationError(
            f"query {query.id} stopped inside batch {started[-1]}: the batch started but did not commit, so its "
            f"outputs may be partly written and a new query would write them again. Restart the query on its "
            f"checkpoint (Spark runs batch {started[-1]} again, exactly once) and call stop_with_savepoint when it is "
            f"between batches (a trigger interval leaves time between them)")
    batch = committed[-1]
    commits: tuple[Mapping[str, Any], ...] = ()
    if kafka_source_options is not None:
        from connectors.kafka.group_offsets import commit_savepoint_offsets

        sources, _ = found.batch_offsets(batch)
        commit = commit_savepoint_offsets(kafka_source_options, sources, kafka_source_index, batch)
        commits = (commit,) if commit is not None else ()
    return write_savepoint(spark, checkpoint, path, batch_id=batch, _kafka_group_commits=commits, **options)


def _session_of(query: Any) -> Any:
    session = getattr(query, "_session", None)  # Spark Connect's StreamingQuery
    if session is None:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
    if session is None:
        raise ConfigurationError("stop_with_savepoint found no active Spark session; pass spark=")
    return session


def _checkpoint_of(query: Any) -> str:
    try:
        return str(query._jsq.streamingQuery().resolvedCheckpointRoot())
    except Exception as error:  # Spark Connect, or another Spark's internals
        raise ConfigurationError("stop_with_savepoint cannot read the query's checkpoint location from this session; "
                                 "pass checkpoint_location=") from error


def _stop_between_batches(query: Any, timeout_seconds: float) -> None:
    """Stop ``query`` when no trigger runs (Spark has no stop-after-this-batch; the window between batches is what
    there is), or after ``timeout_seconds`` in any case."""
    deadline = time.monotonic() + timeout_seconds
    while query.isActive and time.monotonic() < deadline:
        if not query.status.get("isTriggerActive", False):
            break
        time.sleep(0.01)
    query.stop()


def _live_states(section: Mapping[str, Any]) -> Optional[dict[str, int]]:
    """The states the source query held at the savepoint's batch, by name, with their incarnations (None when it
    recorded none: a savepoint or bootstrap as the source, or a checkpoint older than the record)."""
    record = section.get("query_settings")
    if not record:
        return None
    batch = section.get("batch_id")
    live = {state["name"]: int(state.get("incarnation", 0)) for state in record.get("states", ())}
    for state in record.get("dropped_states", ()):  # dropped after the savepoint's batch: still live at it
        if batch is not None and int(state["dropped_batch"]) > int(batch):
            live.setdefault(state["name"], int(state.get("incarnation", 0)))
    return live
