"""``KeyedProcessOptions``: the settings ``keyed_process``, ``keyed_co_process`` and ``bootstrap_keyed_state`` share,
checked once when built; behind the entry points only this object travels. What needs the Spark session (default
``uid`` and ``state_storage``) is filled in by :func:`keyedstate.spark.state_backend_options.resolve_state_backend`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional, Union

from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import DEFAULT_NUM_KEY_GROUPS, validate_num_key_groups
from keyedstate.spark.key_group_layout import BALANCED, check_key_group_layout
from keyedstate.spark.state_backend_options import UID_RULE, is_valid_uid, suggested_uid
from keyedstate.state.base.kinds import HEAP, STATE_BACKENDS
from keyedstate.state.key_groups.initial_state import KeyedStateBootstrap
from keyedstate.state.rocksdb.options import RocksDBOptions
from keyedstate.state.rocksdb.versions import SnapshotPolicy

__all__ = ["KeyedProcessOptions", "EVENT_TIME", "PROCESSING_TIME", "DEFAULT_POLL_INTERVAL_MS"]

EVENT_TIME = "event_time"
PROCESSING_TIME = "processing_time"
DEFAULT_POLL_INTERVAL_MS = 1_000


@dataclass(frozen=True)
class KeyedProcessOptions:
    """How a keyed operator runs and where its state lives, validated when built. ``keyed_process`` and
    ``keyed_co_process`` take each field as a keyword argument (:func:`keyedstate.spark.keyed_process` describes
    each in full); ``bootstrap_keyed_state`` takes the state fields.

    * ``time_mode``: ``"event_time"`` (Spark's watermark drives event-time timers) or ``"processing_time"``.
    * ``num_key_groups``: how many key groups (fixed for the checkpoint's life); None groups by the user key.
    * ``key_group_layout``: ``"balanced"`` or ``"identity"``, how key groups map to Spark groups (fixed too).
    * ``processing_time_poll_interval_ms``: processing-time mode: how often event-time timers are polled.
    * ``drop_late_events``: Spark drops elements behind the watermark before the function sees them.
    * ``emit_metrics``: keep the per-call metric rows in the output (side output ``keyedstate_metrics``).
    * ``progress_metrics``: sum the metric rows into the query's ``lastProgress["observedMetrics"]``.
    * ``state_backend``: ``"heap"`` (state in Spark's state rows) or ``"rocksdb"`` (local RocksDB databases).
    * ``state_storage``: the path or ``pyarrow.fs`` URI of durable RocksDB state and of the settings record every
      restart is checked against; None: a local default on ``local[...]`` masters.
    * ``state_storage_options``: how to reach it (``retry_seconds``, S3 credentials); kept as ``StorageOptions``.
    * ``state_local_dir``: RocksDB only, where executors keep their local databases.
    * ``uid``: names the operator's directories in ``state_storage``; None: derived from the function's class.
    * ``rocksdb_options``: RocksDB only, a :class:`keyedstate.RocksDBOptions`.
    * ``snapshot_policy``: RocksDB only, a :class:`SnapshotPolicy`: when a base snapshot replaces changelogs.
    * ``initial_state``: the bootstrap or savepoint (path or :class:`KeyedStateBootstrap`) a query starts from.
    * ``job_parameters``: strings every function reads with ``runtime_context.get_job_parameter(key, default)``
      (Flink's global job parameters).
    """

    time_mode: str = EVENT_TIME
    num_key_groups: Optional[int] = DEFAULT_NUM_KEY_GROUPS
    key_group_layout: str = BALANCED
    processing_time_poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS
    drop_late_events: bool = False
    emit_metrics: bool = False
    progress_metrics: bool = True
    state_backend: str = HEAP
    state_storage: Optional[str] = None
    state_storage_options: Optional[Mapping[str, Any]] = None
    state_local_dir: Optional[str] = None
    uid: Optional[str] = None
    rocksdb_options: Optional[RocksDBOptions] = None
    snapshot_policy: Optional[SnapshotPolicy] = None
    initial_state: Optional[Union[str, KeyedStateBootstrap]] = None
    job_parameters: Optional[Mapping[str, str]] = None

    def __post_init__(self) -> None:
        poll = self.processing_time_poll_interval_ms
        if not isinstance(poll, int) or isinstance(poll, bool) or poll <= 0:
            raise ConfigurationError("processing_time_poll_interval_ms must be a positive int of milliseconds")
        if self.num_key_groups is not None:
            validate_num_key_groups(self.num_key_groups)
        check_key_group_layout(self.key_group_layout)
        if self.time_mode not in (EVENT_TIME, PROCESSING_TIME):
            raise ConfigurationError(f"time_mode must be 'event_time' or 'processing_time', got {self.time_mode!r}")
        self._check_state_backend()
        if self.uid is not None and not is_valid_uid(self.uid):
            suggestion = suggested_uid(self.uid) if isinstance(self.uid, str) and self.uid else "my-operator"
            raise ConfigurationError(
                f"uid={self.uid!r} is not valid: {UID_RULE} (it names a directory in state_storage); e.g. "
                f"uid={suggestion!r}")
        if self.state_storage is not None and (not isinstance(self.state_storage, str) or not self.state_storage):
            raise ConfigurationError(f"state_storage must be a path or URI string, got {self.state_storage!r}")
        object.__setattr__(self, "state_storage_options", StorageOptions.parse(self.state_storage_options))
        parameters = self.job_parameters
        if parameters is not None and not (isinstance(parameters, Mapping) and all(
                isinstance(key, str) and isinstance(value, str) for key, value in parameters.items())):
            raise ConfigurationError(f"job_parameters must be a dict of str to str, such as {{'threshold': '10'}}, "
                                     f"got {parameters!r}")

    def _check_state_backend(self) -> None:
        if self.state_backend not in STATE_BACKENDS:
            raise ConfigurationError(f"state_backend must be one of {', '.join(map(repr, STATE_BACKENDS))}, got "
                                     f"{self.state_backend!r}")
        if self.state_backend == HEAP:
            given = [name for name in ("state_local_dir", "rocksdb_options", "snapshot_policy")
                     if getattr(self, name) is not None]
            if given:
                raise ConfigurationError(
                    f"{', '.join(given)} only apply with state_backend='rocksdb' (the heap backend keeps state in "
                    f"Spark's state rows); pass state_backend='rocksdb' or drop them")
        if self.rocksdb_options is not None and not isinstance(self.rocksdb_options, RocksDBOptions):
            raise ConfigurationError(f"rocksdb_options must be a keyedstate.RocksDBOptions, got "
                                     f"{type(self.rocksdb_options).__qualname__}")
        if self.snapshot_policy is not None and not isinstance(self.snapshot_policy, SnapshotPolicy):
            raise ConfigurationError(f"snapshot_policy must be a keyedstate.spark.SnapshotPolicy, got "
                                     f"{type(self.snapshot_policy).__qualname__}")

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> "KeyedProcessOptions":
        """The options among ``arguments``: an entry point's ``locals()``, its keyword arguments named as the
        fields, so a new field reaches it by adding the keyword argument."""
        return cls(**{field.name: arguments[field.name] for field in fields(cls) if field.name in arguments})

    @property
    def storage_options(self) -> StorageOptions:
        """``state_storage_options`` as ``__post_init__`` keeps it: a ``StorageOptions``, never None or a dict."""
        options = self.state_storage_options
        assert isinstance(options, StorageOptions)
        return options

    @property
    def metric_rows(self) -> bool:
        """Whether each call emits its metric rows: kept in the output, summed into the progress, or both."""
        return self.emit_metrics or self.progress_metrics
