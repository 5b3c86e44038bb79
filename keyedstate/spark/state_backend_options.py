"""The state-backend settings of a keyed operator that need the Spark session: the default uid and state storage."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, SnapshotError
from keyedstate.redaction import redact_uri
from keyedstate.state.base.kinds import HEAP

if TYPE_CHECKING:
    from keyedstate.spark.options import KeyedProcessOptions

__all__ = ["resolve_state_backend", "retained_batches", "default_uid", "is_valid_uid", "suggested_uid", "UID_RULE"]

#: CheckpointStorage.check_scope's rule, in words.
UID_RULE = ("a uid is 1-200 characters: letters, digits, '.', '_' or '-', and the first one a letter or digit")
_UID_MAX = 200
_DISALLOWED = re.compile(r"[^A-Za-z0-9._-]")
_LEADING = re.compile(r"^[^A-Za-z0-9]+")

logger = logging.getLogger("keyedstate.spark")

_DEFAULT_RETAIN_BATCHES = 100  # Spark's default spark.sql.streaming.minBatchesToRetain


def is_valid_uid(uid: Any) -> bool:
    """Whether ``uid`` follows :data:`UID_RULE`."""
    try:
        CheckpointStorage.check_scope(uid)  # the same rule: a uid names a directory in the storage
    except ConfigurationError:
        return False
    return True


def suggested_uid(name: str) -> str:
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
    if is_valid_uid(legacy):
        return legacy
    digest = hashlib.sha256(qualname.encode("utf-8")).hexdigest()[:8]
    return f"{suggested_uid(legacy)[:_UID_MAX - 9]}-{digest}"


def resolve_state_backend(options: "KeyedProcessOptions", conf: Any, function: Any) -> "KeyedProcessOptions":
    """``options`` with the default ``uid`` (of ``function``'s class) and ``state_storage`` filled in, the storage
    checked writable; ``conf`` is the Spark session's. In row mode ``state_storage`` holds only the record of the
    query's settings (:mod:`keyedstate.spark.query_settings`)."""
    if options.uid is None:
        options = replace(options, uid=default_uid(type(function).__qualname__))
    state_storage = options.state_storage
    if state_storage is None:
        master = str(conf.get("spark.master", "local"))
        if not master.startswith("local"):
            if options.state_backend == HEAP:
                # The heap backend's state is in Spark's checkpoint; only the restart check's record needs storage.
                logger.warning(
                    "state_backend='heap' on master %r without state_storage: a restart that changes "
                    "num_key_groups, key_group_layout or the key column types is caught only in key groups that "
                    "already hold state. Pass state_storage=<URI every executor reaches> to record the query's "
                    "settings and check every restart before it runs", master)
                return options
            raise ConfigurationError(
                f"state_backend='rocksdb' on master {master!r} needs state_storage=<URI every executor reaches> "
                f"(s3://bucket/path, hdfs://..., or a shared mount); the default local directory is only durable "
                f"on a single machine"
            )
        from keyedstate.spark.rocksdb_mode import default_state_storage

        state_storage = default_state_storage()
    try:
        # fails now, naming the URI, rather than in every task (a read-only storage would fail only in batch 0)
        CheckpointStorage(state_storage, options=options.state_storage_options).check_writable()
    except (SnapshotError, ConfigurationError) as error:
        raise ConfigurationError(f"state_storage {redact_uri(state_storage)!r} is not usable: {error}") from error
    return replace(options, state_storage=state_storage)


def retained_batches(conf: Any) -> int:
    """How many batches Spark keeps restorable (``spark.sql.streaming.minBatchesToRetain``)."""
    return max(1, int(conf.get("spark.sql.streaming.minBatchesToRetain", str(_DEFAULT_RETAIN_BATCHES))))
