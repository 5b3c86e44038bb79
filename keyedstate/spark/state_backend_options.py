"""Checking ``keyed_process``'s state-backend options on the driver, where a mistake can still be named clearly."""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any, Mapping, Optional

from keyedstate.state.rocksdb.versions import SnapshotPolicy
from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, SnapshotError
from keyedstate.redaction import redact_uri
from keyedstate.state.key_groups.store import HEAP, ROCKSDB, STATE_BACKENDS
from keyedstate.state.rocksdb.options import RocksDBOptions

__all__ = ["resolve_rocksdb_mode", "default_uid", "UID_RULE"]

#: CheckpointStorage.check_scope's rule, in words.
UID_RULE = ("a uid is 1-200 characters: letters, digits, '.', '_' or '-', and the first one a letter or digit")
_UID_MAX = 200
_DISALLOWED = re.compile(r"[^A-Za-z0-9._-]")
_LEADING = re.compile(r"^[^A-Za-z0-9]+")

logger = logging.getLogger("keyedstate.spark")

_DEFAULT_RETAIN_BATCHES = 100  # Spark's default spark.sql.streaming.minBatchesToRetain


def _valid_uid(uid: Any) -> bool:
    try:
        CheckpointStorage.check_scope(uid)  # the same rule: a uid names a directory in the storage
    except ConfigurationError:
        return False
    return True


def _repair(name: str) -> str:
    """``name`` turned into a valid uid: disallowed characters become '_', each dot-separated part loses its
    leading non-alphanumerics (``_make``, ``<locals>``), empty parts go."""
    parts = [_LEADING.sub("", _DISALLOWED.sub("_", part)) for part in name.split(".")]
    return ".".join(part for part in parts if part)[:_UID_MAX] or "operator"


def default_uid(qualname: str) -> str:
    """The uid of a function class when none is given: its ``__qualname__`` without ``<``/``>``.

    Names that are valid uids that way keep exactly that uid, because it names the state directory of every
    existing RocksDB-mode checkpoint. Only names that used to be refused (a class defined in ``_make()`` is
    ``_make.<locals>.Count``, a class name may hold non-ASCII letters) are repaired; the repair is lossy, so a
    hash of the full qualname, stable across processes unlike ``hash()``, keeps two such classes apart.
    """
    legacy = qualname.replace("<", "").replace(">", "")
    if _valid_uid(legacy):
        return legacy
    digest = hashlib.sha256(qualname.encode("utf-8")).hexdigest()[:8]
    return f"{_repair(legacy)[:_UID_MAX - 9]}-{digest}"


def resolve_rocksdb_mode(df: Any, function: Any, state_backend: str, state_storage: Optional[str],
                         state_local_dir: Optional[str], uid: Optional[str], rocksdb_options: Optional[RocksDBOptions],
                         snapshot_policy: Optional[SnapshotPolicy],
                         state_storage_options: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The GroupFunctionSpec fields of the state backend; RocksDB-only options are refused in row mode, where
    ``state_storage`` holds only the record of the query's settings (:mod:`keyedstate.spark.query_settings`)."""
    if state_backend not in STATE_BACKENDS:
        raise ConfigurationError(f"state_backend must be one of {', '.join(map(repr, STATE_BACKENDS))}, got "
                                 f"{state_backend!r}")
    if state_backend == HEAP:
        given = [name for name, value in (("state_local_dir", state_local_dir),
                                          ("rocksdb_options", rocksdb_options), ("snapshot_policy", snapshot_policy))
                 if value is not None]
        if given:
            raise ConfigurationError(f"{', '.join(given)} only apply with state_backend='rocksdb' (the heap backend "
                                     f"keeps state in Spark's state rows); pass state_backend='rocksdb' or drop them")
    elif rocksdb_options is not None and not isinstance(rocksdb_options, RocksDBOptions):
        raise ConfigurationError(f"rocksdb_options must be a keyedstate.RocksDBOptions, got "
                                 f"{type(rocksdb_options).__qualname__}")
    if snapshot_policy is not None and not isinstance(snapshot_policy, SnapshotPolicy):
        raise ConfigurationError(f"snapshot_policy must be a keyedstate.spark.SnapshotPolicy, got "
                                 f"{type(snapshot_policy).__qualname__}")
    if uid is None:
        uid = default_uid(type(function).__qualname__)
    elif not _valid_uid(uid):
        suggestion = _repair(uid) if isinstance(uid, str) and uid else "my-operator"
        raise ConfigurationError(
            f"uid={uid!r} is not valid: {UID_RULE} (it names a directory in state_storage); e.g. "
            f"uid={suggestion!r}")
    conf = df.sparkSession.conf
    if state_storage is None:
        master = str(conf.get("spark.master", "local"))
        if not master.startswith("local"):
            if state_backend == HEAP:
                # The heap backend's state is in Spark's checkpoint; only the restart check's record needs storage.
                logger.warning(
                    "state_backend='heap' on master %r without state_storage: a restart that changes "
                    "num_key_groups, key_group_layout or the key column types is caught only in key groups that "
                    "already hold state. Pass state_storage=<URI every executor reaches> to record the query's "
                    "settings and check every restart before it runs", master)
                return {"state_backend": HEAP, "uid": uid}
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
        raise ConfigurationError(f"state_storage {redact_uri(state_storage)!r} is not usable: {error}") from error
    if state_backend == HEAP:
        return {"state_backend": HEAP, "state_storage": state_storage, "state_storage_options": options, "uid": uid}
    retain = int(conf.get("spark.sql.streaming.minBatchesToRetain", str(_DEFAULT_RETAIN_BATCHES)))
    return {
        "state_backend": ROCKSDB, "state_storage": state_storage, "state_storage_options": options,
        "local_dir": state_local_dir, "uid": uid,
        "retain_batches": max(1, retain), "rocksdb_options": rocksdb_options, "snapshot_policy": snapshot_policy,
    }
