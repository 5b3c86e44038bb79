"""Savepoints, on the driver: what a savepoint is written from, and what it records about it.

Two kinds of source:

* **a checkpoint** of a ``keyed_process`` / ``keyed_co_process`` query at one committed batch: its key-group rows
  (Spark's state data source, read in the executors), the query's settings record (key column types, number of key
  groups, backend; :mod:`keyedstate.spark.query_settings`), and the batch's line of source offsets. Key groups
  that had not run yet in a query started from ``initial_state`` have no row: their state is still the initial
  state's, so those key groups are read from there.
* **a savepoint or bootstrap directory**: its row files, to write it again for other target settings.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.locations import join_location
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.cleanup.spark_checkpoint import SparkCheckpoint
from keyedstate.errors import ConfigurationError, SnapshotError
from keyedstate.redaction import redact_uri
from keyedstate.spark.key_group_layout import BALANCED, key_group_of_grouping_value
from keyedstate.spark.query_settings import SETTINGS_RECORD, operator_storage_location, recorded_settings
from keyedstate.spark_compat import STATE_DATA_SOURCE, require_spark
from keyedstate.state.key_groups.initial_state import BOOTSTRAP_MANIFEST, KeyedStateBootstrap, read_bootstrap_manifest

__all__ = ["SavepointSource", "checkpoint_source", "directory_source", "is_savepoint_directory"]

_GROUPING_FIELD = "_keyedstate_key_group"
_FILES_SCHEMA = "key_group INT, entry STRING"


@dataclass(frozen=True)
class SavepointSource:
    """What the executors decode (``parts``: (kind, DataFrame, location of version files, its storage options) for
    :class:`~keyedstate.spark.savepoint_records.SourceDecoder`) and what the savepoint records about its origin."""

    parts: tuple[tuple[str, Any, Optional[str], Optional[StorageOptions]], ...]
    key_types: tuple[str, ...]
    key_names: tuple[str, ...]
    num_key_groups: Optional[int]
    state_backend: str
    section: dict[str, Any] = field(default_factory=dict)


def is_savepoint_directory(location: str, options: Optional[StorageOptions]) -> bool:
    try:
        return CheckpointStorage(location, options=options, create=False).exists(BOOTSTRAP_MANIFEST)
    except (SnapshotError, ConfigurationError):
        return False


def _key_fields(key_schema: Any, recorded: Optional[list[str]], where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names, Spark types) of the key columns: ``key_schema`` when given, else the recorded types."""
    if key_schema is not None:
        from keyedstate.spark.schemas import parse_schema

        fields = parse_schema(key_schema, "key_schema").fields
        types = tuple(f.dataType.simpleString() for f in fields)
        if recorded is not None and list(types) != list(recorded):
            raise ConfigurationError(
                f"key_schema has types ({', '.join(types)}) but {where} recorded ({', '.join(recorded)}); a key's "
                f"key group depends on them. Drop key_schema, or give the recorded types")
        return tuple(f.name for f in fields), types
    if recorded is None:
        raise ConfigurationError(
            f"{where} has no record of the key columns' Spark types (a heap-mode query on a cluster without "
            f"state_storage, or a checkpoint written before keyedstate recorded them); pass key_schema with the key "
            f"columns as keyed_process saw them, e.g. key_schema='user STRING'")
    names = ("key",) if len(recorded) == 1 else tuple(f"key_{i}" for i in range(1, len(recorded) + 1))
    return names, tuple(recorded)


def directory_source(spark: Any, source: Union[str, os.PathLike[str], KeyedStateBootstrap],
                     options: Optional[StorageOptions], key_schema: Any) -> SavepointSource:
    """A savepoint or bootstrap directory as the source."""
    path = source.path if isinstance(source, KeyedStateBootstrap) else os.fspath(source)
    if isinstance(source, KeyedStateBootstrap) and source.storage_options is not None:
        options = source.storage_options
    body = read_bootstrap_manifest(path, options)
    if body is None:
        raise ConfigurationError(f"{redact_uri(path)!r} holds no savepoint ({BOOTSTRAP_MANIFEST} is missing): an "
                                 f"interrupted write_savepoint leaves none; write the savepoint again")
    types = [str(kind) for _, kind in body["key_columns"]]
    names, types_ = _key_fields(key_schema, types, f"the savepoint at {redact_uri(path)}")
    rows = [(int(group), json.dumps(entry)) for group, entry in body["rows"].items()]
    frame = spark.createDataFrame(rows, _FILES_SCHEMA) if rows else None
    origin = dict(body.get("savepoint") or {})
    section = {key: origin.get(key) for key in ("batch_id", "query_id", "uid", "source_offsets", "query_settings",
                                                 "batch_watermark_ms", "batch_timestamp_ms", "next_batch_watermark_ms",
                                                 "kafka_group_commits", "operator_id")}
    section["source"] = {"kind": "savepoint" if origin else "bootstrap", "location": redact_uri(path),
                         "id": body["bootstrap_id"], "num_key_groups": body["num_key_groups"],
                         "state_backend": body["state_backend"]}
    parts = (("files", frame, path, options),) if frame is not None else ()
    return SavepointSource(parts, types_, names, int(body["num_key_groups"]), str(body["state_backend"]), section)


def checkpoint_source(spark: Any, checkpoint_location: str, *, batch_id: Optional[int], operator_id: int,
                      uid: Optional[str], state_storage: Optional[str], options: Optional[StorageOptions],
                      key_schema: Any, initial_state: Any, state_backend: Optional[str],
                      num_key_groups: Optional[int]) -> SavepointSource:
    """A query's checkpoint at ``batch_id`` (default: the last committed batch) as the source."""
    require_spark(STATE_DATA_SOURCE, "write_savepoint from a checkpoint (it reads Spark's state data source)",
                  "write the savepoint with Spark 4.0+; a query on Spark 3.5 can start from it")
    checkpoint = SparkCheckpoint(checkpoint_location)
    query_id = checkpoint.query_id()
    committed = checkpoint.batch_ids()
    if not committed:
        raise ConfigurationError(f"the query of checkpoint {checkpoint_location} has committed no batch yet: there is "
                                 f"no state to save. Let it run a batch first")
    batch = committed[-1] if batch_id is None else int(batch_id)
    if batch not in committed:
        raise ConfigurationError(f"batch {batch} is not in the commit log of checkpoint {checkpoint_location} "
                                 f"(committed: {committed[0]}..{committed[-1]}); a savepoint holds a committed batch")
    if not state_storage:
        from keyedstate.spark.rocksdb_mode import default_state_storage

        state_storage = default_state_storage()
    uid, settings = _settings(state_storage, query_id, uid, options)
    recorded = settings["settings"] if settings else None
    where = f"the query of checkpoint {checkpoint_location}"
    names, types = _key_fields(key_schema, list(recorded["key_types"]) if recorded else None, where)
    source_groups = recorded["num_key_groups"] if recorded else num_key_groups
    backend = recorded["state_backend"] if recorded else state_backend
    if backend is None or (recorded is None and num_key_groups is None):
        raise ConfigurationError(f"{where} has no settings record; pass state_backend= and num_key_groups= as the "
                                 f"query ran with")
    offsets_lines, metadata = checkpoint.batch_offsets(batch)
    commit = checkpoint.storage.read_bytes(f"commits/{batch}").decode("utf-8").splitlines()
    next_watermark = json.loads(commit[1]).get("nextBatchWatermarkMs") if len(commit) > 1 else None
    frame = (spark.read.format("statestore").option("operatorId", operator_id).option("batchId", batch)
             .load(checkpoint_location))
    value = "value.groupState" if "groupState" in frame.schema["value"].dataType.fieldNames() else "value"
    rows = frame.select(f"{value}.*")
    parts: list[tuple[str, Any, Optional[str], Optional[StorageOptions]]] = [("rows", rows, None, options)]
    started_from = recorded.get("initial_state") if recorded else None
    if recorded is not None and started_from is not None:
        parts += _initial_state_part(spark, frame, recorded, started_from, initial_state, options, where)
    section = {
        "batch_id": batch, "query_id": query_id, "uid": uid, "operator_id": operator_id,
        "source_offsets": offsets_lines, "query_settings": settings,
        "batch_watermark_ms": metadata.get("batchWatermarkMs"), "batch_timestamp_ms": metadata.get("batchTimestampMs"),
        "next_batch_watermark_ms": next_watermark,
        "source": {"kind": "checkpoint", "location": redact_uri(checkpoint_location), "num_key_groups": source_groups,
                   "state_backend": backend, "initial_state": started_from},
    }
    return SavepointSource(tuple(parts), types, names, source_groups, backend, section)


def _settings(state_storage: str, query_id: str, uid: Optional[str],
              options: Optional[StorageOptions]) -> tuple[Optional[str], Optional[dict[str, Any]]]:
    """The operator's uid and its settings record (None when the query recorded none)."""
    try:
        if uid is None:
            query_dir = CheckpointStorage(join_location(state_storage, query_id), options=options, create=False)
            candidates = [name for name, is_dir, _ in query_dir.list_entries("") if is_dir
                          and query_dir.exists(f"{name}/{SETTINGS_RECORD}")]
            if len(candidates) > 1:
                raise ConfigurationError(
                    f"the query's state storage {redact_uri(query_dir.location)} holds the settings of several "
                    f"operators ({', '.join(sorted(candidates))}); pass uid= (the keyed_process uid) to choose one")
            if not candidates:
                return None, None
            uid = candidates[0]
        storage = CheckpointStorage(operator_storage_location(state_storage, query_id, uid), options=options,
                                    create=False)
        return uid, recorded_settings(storage) if storage.exists(SETTINGS_RECORD) else None
    except SnapshotError as error:
        raise ConfigurationError(f"the query's state storage {redact_uri(state_storage)!r} is not readable: "
                                 f"{error}; pass state_storage= and state_storage_options= as keyed_process had "
                                 f"them") from error


def _initial_state_part(spark: Any, frame: Any, recorded: Mapping[str, Any], started_from: str, initial_state: Any,
                        options: Optional[StorageOptions], where: str,
                        ) -> list[tuple[str, Any, Optional[str], Optional[StorageOptions]]]:
    """The initial state's rows of the key groups that have no row in the checkpoint (they have not run yet)."""
    if initial_state is None:
        raise ConfigurationError(
            f"{where} started from the initial state of bootstrap {started_from}, and key groups that have not run "
            f"yet still hold only that state; pass initial_state= (what keyed_process was given) to include it")
    path = initial_state.path if isinstance(initial_state, KeyedStateBootstrap) else os.fspath(initial_state)
    if isinstance(initial_state, KeyedStateBootstrap) and initial_state.storage_options is not None:
        options = initial_state.storage_options
    body = read_bootstrap_manifest(path, options)
    if body is None or body["bootstrap_id"] != started_from:
        found = "no bootstrap" if body is None else f"bootstrap {body['bootstrap_id']}"
        raise ConfigurationError(f"{where} started from bootstrap {started_from}, but initial_state "
                                 f"{redact_uri(path)!r} holds {found}; pass the initial_state the query started from")
    layout = recorded.get("key_group_layout") or BALANCED
    groups = int(recorded["num_key_groups"])
    grouping = [int(row[0]) for row in frame.select(f"key.{_GROUPING_FIELD}").collect()]
    ran = {key_group_of_grouping_value(value, groups, layout) for value in grouping}
    rows = [(int(group), json.dumps(entry)) for group, entry in body["rows"].items() if int(group) not in ran]
    return [("files", spark.createDataFrame(rows, _FILES_SCHEMA), path, options)] if rows else []
