"""Checking ``keyed_process``'s state-backend options on the driver, where a mistake can still be named clearly."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from keyedstate.state.rocksdb.versions import SnapshotPolicy
from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, SnapshotError
from keyedstate.state.key_groups.store import HEAP, ROCKSDB, STATE_BACKENDS
from keyedstate.state.rocksdb.options import RocksDBOptions

__all__ = ["resolve_rocksdb_mode"]

_DEFAULT_RETAIN_BATCHES = 100  # Spark's default spark.sql.streaming.minBatchesToRetain


def resolve_rocksdb_mode(df: Any, function: Any, state_backend: str, state_storage: Optional[str],
                         state_local_dir: Optional[str], uid: Optional[str], rocksdb_options: Optional[RocksDBOptions],
                         snapshot_policy: Optional[SnapshotPolicy],
                         state_storage_options: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The GroupFunctionSpec fields of the state backend; RocksDB-only options are refused in row mode."""
    if state_backend not in STATE_BACKENDS:
        raise ConfigurationError(f"state_backend must be one of {', '.join(map(repr, STATE_BACKENDS))}, got "
                                 f"{state_backend!r}")
    if state_backend == HEAP:
        given = [name for name, value in (("state_storage", state_storage),
                                          ("state_storage_options", state_storage_options),
                                          ("state_local_dir", state_local_dir),
                                          ("rocksdb_options", rocksdb_options), ("snapshot_policy", snapshot_policy))
                 if value is not None]
        if given:
            raise ConfigurationError(f"{', '.join(given)} only apply with state_backend='rocksdb' (the heap backend "
                                     f"keeps state in Spark's state rows); pass state_backend='rocksdb' or drop them")
        return {"state_backend": HEAP}
    if rocksdb_options is not None and not isinstance(rocksdb_options, RocksDBOptions):
        raise ConfigurationError(f"rocksdb_options must be a keyedstate.RocksDBOptions, got "
                                 f"{type(rocksdb_options).__qualname__}")
    if snapshot_policy is not None and not isinstance(snapshot_policy, SnapshotPolicy):
        raise ConfigurationError(f"snapshot_policy must be a keyedstate.spark.SnapshotPolicy, got "
                                 f"{type(snapshot_policy).__qualname__}")
    uid = uid if uid is not None else type(function).__qualname__.replace("<", "").replace(">", "")
    try:
        CheckpointStorage.check_scope(uid)  # the same rule: it names a directory in the storage
    except ConfigurationError:
        raise ConfigurationError(f"uid must be 1-200 letters, digits, '.', '_' or '-' (it names a directory), got "
                                 f"{uid!r}") from None
    conf = df.sparkSession.conf
    if state_storage is None:
        master = str(conf.get("spark.master", "local"))
        if not master.startswith("local"):
            raise ConfigurationError(
                f"state_backend='rocksdb' on master {master!r} needs state_storage=<URI every executor reaches> "
                f"(s3://bucket/path, hdfs://..., or a shared mount); the default local directory is only durable "
                f"on a single machine"
            )
        from keyedstate.spark.rocksdb_mode import default_state_storage

        state_storage = default_state_storage()
    if not isinstance(state_storage, str) or not state_storage:
        raise ConfigurationError(f"state_storage must be a path or URI string, got {state_storage!r}")
    options = StorageOptions.parse(state_storage_options)
    try:
        # fails now, naming the URI, rather than in every task (a read-only storage would fail only in batch 0)
        CheckpointStorage(state_storage, options=options).check_writable()
    except (SnapshotError, ConfigurationError) as error:
        raise ConfigurationError(f"state_storage {state_storage!r} is not usable: {error}") from error
    retain = int(conf.get("spark.sql.streaming.minBatchesToRetain", str(_DEFAULT_RETAIN_BATCHES)))
    return {
        "state_backend": ROCKSDB, "state_storage": state_storage, "state_storage_options": options,
        "local_dir": state_local_dir, "uid": uid,
        "retain_batches": max(1, retain), "rocksdb_options": rocksdb_options, "snapshot_policy": snapshot_policy,
    }
