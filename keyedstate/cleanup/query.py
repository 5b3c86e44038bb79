"""``clean_up_query``: remove what a stopped streaming query left outside its checkpoint.

A RocksDB-mode query keeps its state files below ``<state_storage>/<query id>/`` and its local databases below
``<state_local_dir>/<query id>/``; the exactly-once Kafka sink keeps one progress-marker consumer group per write
partition. None of them is deleted when the query stops (a restart needs them), so they stay until removed here.

Deleting them under a running query, or under a checkpoint that will be restarted, loses state, so the clean-up
refuses unless ``force``:

* *The query runs.* Spark keeps no lock a second process could see, so "running" is decided from what a run writes:
  it is running when it is an active query of a Spark session in this process, or when a batch started or committed
  (``offsets/``, ``commits/``) or a RocksDB-mode run registered (``_writers/`` in the state storage) less than
  ``idle_seconds`` ago, or when a progress-marker group has members. A query that runs but has had no batch for
  ``idle_seconds`` cannot be told from a stopped one: stop queries before cleaning up after them.
* *The checkpoint still needs them.* While the checkpoint holds state rows (``state/``) and the state storage
  holds the query's directory, a restart of the checkpoint would look for those files (the rows are not decoded:
  rows naming another storage count too); while it has a batch log, a restart's replayed batch needs the sink's
  progress markers to stay exactly-once. Pass
  ``delete_checkpoint=True`` to remove the checkpoint too (it goes last, so a clean-up that fails half-way can be run
  again: the checkpoint names the query id).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from typing import Any, Mapping, Optional

from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.cleanup.report import (
    CHECKPOINT,
    CONSUMER_GROUP,
    LOCAL_DATABASES,
    STATE_STORAGE,
    CleanupItem,
    CleanupReport,
)
from keyedstate.cleanup.spark_checkpoint import SparkCheckpoint, arrow_uri
from keyedstate.errors import CleanupRefusedError, ConfigurationError, SnapshotError, StateBackendError

__all__ = ["clean_up_query", "DEFAULT_IDLE_SECONDS"]

logger = logging.getLogger("keyedstate.cleanup")

#: How long a query must have started and committed no batch before the clean-up treats it as stopped.
DEFAULT_IDLE_SECONDS = 600.0
_WRITERS_DIR = "_writers"  # keyedstate.spark.storage_claims.WRITERS_DIR; not imported: it would load pyspark


def clean_up_query(checkpoint_location: str | os.PathLike[str], *, state_storage: Optional[str] = None,
                   state_storage_options: Optional[Mapping[str, Any]] = None,
                   state_local_dir: Optional[str | os.PathLike[str]] = None,
                   bootstrap_servers: Optional[str] = None, kafka_options: Optional[Mapping[str, str]] = None,
                   transactional_id_prefix: Optional[str] = None,
                   checkpoint_options: Optional[Mapping[str, Any]] = None, delete_checkpoint: bool = False,
                   idle_seconds: float = DEFAULT_IDLE_SECONDS, dry_run: bool = True,
                   force: bool = False) -> CleanupReport:
    """List, and unless ``dry_run`` remove, what the stopped streaming query of ``checkpoint_location`` left behind.

    The query id comes from the checkpoint's ``metadata`` file. Removed (see :class:`CleanupReport`):

    * ``<state_storage>/<query id>/``: RocksDB mode's state files. ``state_storage`` and ``state_storage_options``
      as given to ``keyed_process`` (default: the default storage, ``~/.keyedstate/state-storage``).
    * ``<state_local_dir>/<query id>/`` on this machine: RocksDB mode's local databases (default: the default local
      directory); executors' directories on other machines are not reachable from here.
    * the exactly-once Kafka sink's progress-marker consumer groups ``<prefix>-<query id>-<partition>``, when
      ``bootstrap_servers`` is given (``kafka_options``: librdkafka properties such as security settings, with or
      without the sink's ``kafka.`` prefix). They are found by the query id; ``transactional_id_prefix`` (the sink's
      ``transactionalIdPrefix``) narrows the match to one sink.
    * the checkpoint itself, last, with ``delete_checkpoint=True`` (``checkpoint_options``: storage options of an
      ``s3://``/``s3a://`` checkpoint, like ``state_storage_options``).

    With ``dry_run`` (the default) nothing is removed and the report lists what would be, with sizes, and why a real
    run would refuse. A real run raises :class:`~keyedstate.errors.CleanupRefusedError` while the query may be
    running (an active query in this process, a batch or a run registration less than ``idle_seconds`` old, a
    progress group with members) or while a restart of the kept checkpoint would need what is to be removed (its
    state rows name the state files; its batch log needs the progress groups); ``force=True`` removes anyway.
    """
    if isinstance(idle_seconds, bool) or not isinstance(idle_seconds, (int, float)) or idle_seconds < 0:
        raise ConfigurationError(f"idle_seconds must be a number >= 0, got {idle_seconds!r}")
    location = os.fspath(checkpoint_location)
    checkpoint = SparkCheckpoint(location, checkpoint_options)
    query_id = checkpoint.query_id()
    notes: list[str] = []
    activity: list[tuple[float, str]] = []
    last_batch = checkpoint.last_batch_activity()
    if last_batch is not None:
        activity.append((last_batch, f"a batch started or committed in {location}"))

    storage, storage_item = _state_storage(state_storage, state_storage_options, query_id, notes, activity)
    local_path, local_item = _local_databases(state_local_dir, query_id)
    groups = _progress_groups(bootstrap_servers, query_id, transactional_id_prefix, kafka_options, notes)

    items = [item for item in (storage_item, local_item) if item is not None]
    items += [CleanupItem(CONSUMER_GROUP, group.group_id, detail=f"partition {group.partition}, {group.state}")
              for group in groups]
    if delete_checkpoint:
        files, size = checkpoint.size()
        items.append(CleanupItem(CHECKPOINT, location, files, size))

    refusals = _running(query_id, activity, idle_seconds, groups)
    if not delete_checkpoint:
        refusals += _needed_by_a_restart(checkpoint, storage_item, groups, last_batch is not None)
    report = CleanupReport(query_id, location, dry_run, tuple(items), tuple(refusals), tuple(notes))
    if dry_run:
        return report
    if refusals and not force:
        raise CleanupRefusedError(
            f"not cleaning up after query {query_id}: " + "; ".join(refusals) +
            ". Pass force=True (--force) only if you are sure nothing will use it again")
    if groups:
        from connectors.kafka.progress_groups import delete_progress_groups

        delete_progress_groups(bootstrap_servers or "", groups, kafka_options=kafka_options)
    if storage is not None and storage_item is not None:
        _delete_storage(storage, query_id, storage_item.location)
    if local_path is not None:
        try:
            shutil.rmtree(local_path)
        except OSError as error:
            raise StateBackendError(f"cannot delete the local databases {local_path}: {error}; delete the directory "
                                    f"by hand") from error
    if delete_checkpoint:
        checkpoint.delete()
        if checkpoint.exists() and checkpoint.storage.list_files():
            raise SnapshotError(f"could not delete every file of the checkpoint {location}: see the warnings under "
                                f"keyedstate.checkpoint, and run the clean-up again")
    logger.info("cleaned up after query %s: removed %s", query_id, ", ".join(item.location for item in items))
    return report


def _state_storage(state_storage: Optional[str], options: Optional[Mapping[str, Any]], query_id: str,
                   notes: list[str], activity: list[tuple[float, str]]
                   ) -> tuple[Optional[CheckpointStorage], Optional[CleanupItem]]:
    if state_storage is None:
        from keyedstate.spark.rocksdb_mode import default_state_storage

        state_storage = default_state_storage()
    root = f"{arrow_uri(state_storage).rstrip('/')}"
    storage = CheckpointStorage(root, options=options, create=False)
    location = f"{root}/{query_id}"
    if not storage.exists(query_id):
        notes.append(f"no state directory {location} (a row-mode query, or another state_storage)")
        return None, None
    for uid, is_dir, _ in storage.list_entries(query_id):
        if is_dir:
            activity += [(mtime, f"a RocksDB-mode run registered in {location}/{uid}/{_WRITERS_DIR}")
                         for _, _, mtime in storage.list_entries(f"{query_id}/{uid}/{_WRITERS_DIR}")
                         if mtime is not None]
    files, size = storage.sizes(query_id)
    return storage, CleanupItem(STATE_STORAGE, location, files, size)


def _local_databases(state_local_dir: Optional[str | os.PathLike[str]], query_id: str
                     ) -> tuple[Optional[str], Optional[CleanupItem]]:
    if state_local_dir is None:
        from keyedstate.spark.rocksdb_mode import default_local_dir

        state_local_dir = default_local_dir()
    path = os.path.join(os.fspath(state_local_dir), query_id)
    if not os.path.isdir(path):
        return None, None
    sizes = [os.path.getsize(os.path.join(directory, name)) for directory, _, names in os.walk(path)
             for name in names if os.path.isfile(os.path.join(directory, name))]
    return path, CleanupItem(LOCAL_DATABASES, path, len(sizes), sum(sizes))


def _progress_groups(bootstrap_servers: Optional[str], query_id: str, prefix: Optional[str],
                     kafka_options: Optional[Mapping[str, str]], notes: list[str]) -> list[Any]:
    if bootstrap_servers is None:
        notes.append("Kafka consumer groups not looked for: pass bootstrap_servers (--bootstrap-servers) to find the "
                     "exactly-once sink's progress-marker groups")
        return []
    # Only a clean-up that involves Kafka loads the connector (and confluent-kafka).
    from connectors.kafka.progress_groups import find_progress_groups

    groups = find_progress_groups(bootstrap_servers, query_id, transactional_id_prefix=prefix,
                                  kafka_options=kafka_options)
    if not groups:
        notes.append(f"no progress-marker consumer group of query {query_id} on {bootstrap_servers}")
    return groups


def _needed_by_a_restart(checkpoint: SparkCheckpoint, storage_item: Optional[CleanupItem], groups: list[Any],
                         has_batches: bool) -> list[str]:
    """Why a restart of the kept checkpoint would need what is to be removed. The state rows are not decoded: rows
    naming another state_storage are refused all the same (force overrides)."""
    reasons = []
    fix = "Delete the checkpoint first, or pass delete_checkpoint=True (--delete-checkpoint) to remove it last"
    if storage_item is not None and checkpoint.holds_state():
        reasons.append(f"the checkpoint {checkpoint.location} still holds state rows, which name the files in "
                       f"{storage_item.location}: restarting it would need them. {fix}")
    if groups and has_batches:
        reasons.append(f"the checkpoint {checkpoint.location} still has its batch log: restarting it would need the "
                       f"sink's progress-marker groups, without which a replayed batch is written to Kafka twice. "
                       f"{fix}")
    return reasons


def _running(query_id: str, activity: list[tuple[float, str]], idle_seconds: float, groups: list[Any]) -> list[str]:
    reasons = []
    if _active_here(query_id):
        reasons.append(f"query {query_id} is running in this process's Spark session: stop it first (query.stop())")
    if activity:
        when, what = max(activity)
        age = time.time() - when
        if age < idle_seconds:
            reasons.append(f"{what} {max(age, 0):.0f} s ago, less than idle_seconds={idle_seconds:g} ago: the query "
                           f"may still be running. Stop it and wait, or lower idle_seconds (--idle-seconds) if it "
                           f"has stopped")
    in_use = [group.group_id for group in groups if group.in_use]
    if in_use:
        reasons.append(f"consumer group(s) {', '.join(in_use)} have members: a client is using them")
    return reasons


def _active_here(query_id: str) -> bool:
    """Whether a Spark session of this process runs the query (the one certain signal; never starts Spark)."""
    if "pyspark.sql" not in sys.modules:
        return False
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return False
    try:
        return any(query.id == query_id for query in session.streams.active)
    except Exception:  # noqa: BLE001 - a stopped or remote session: nothing runs here that it could tell
        return False


def _delete_storage(storage: CheckpointStorage, query_id: str, location: str) -> None:
    storage.delete_tree(query_id)
    left = storage.list_files(query_id) if storage.exists(query_id) else []
    if left:
        raise SnapshotError(f"could not delete {len(left)} files below {location} (first: {left[0]}): see the "
                            f"warnings under keyedstate.checkpoint, and run the clean-up again")
