"""``KeyedProcessOptions``: the settings ``keyed_process``, ``keyed_co_process`` and ``bootstrap_keyed_state`` share,
checked once when built; behind the entry points only this object travels. What needs the Spark session (default
``uid`` and ``state_storage``) is filled in by :func:`keyedstate.spark.state_backend_options.resolve_state_backend`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from difflib import get_close_matches
from typing import Any, Collection, Mapping, Optional, Union

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
    """How a keyed operator runs and where its state lives, validated when built. ``keyed_process``,
    ``keyed_co_process`` and ``apply_in_pandas_with_state_args`` take it as ``options=`` and each field as a keyword
    argument (which replaces that field of ``options``); ``bootstrap_keyed_state`` takes the state fields.

    * ``time_mode``: with ``"event_time"`` (default) the watermark is Spark's (``df.withWatermark(...)`` upstream is
      required) and event-time timers are mirrored into Spark's event-time timeout. ``"processing_time"`` uses the
      micro-batch timestamp as processing time and Spark's processing-time timeout; event-time timers then fire when
      polled every ``processing_time_poll_interval_ms``.
    * ``num_key_groups`` is fixed for the life of the checkpoint. ``None`` groups by the user key itself (slow:
      about 1 ms of Spark overhead per key and batch).
    * ``key_group_layout`` is fixed for the life of the checkpoint too. ``"balanced"`` (default) runs key group
      ``g`` in shuffle partition ``g mod spark.sql.shuffle.partitions``, so every Spark task gets the same number of
      key groups; ``"identity"`` groups by the key-group number and leaves the spread to Spark's hash (the layout
      of checkpoints written by keyedstate before the balanced layout existed).
    * Late elements (event time older than the watermark) reach ``process_element`` as in Flink, where
      ``ctx.timestamp() < ctx.timer_service().current_watermark()`` tells them apart; ``drop_late_events=True``
      lets Spark drop them before the function instead (its late-row filter then needs the event-time column as
      a pandas timestamp: a value after 2262-04-11 or before 1677-09-21 fails the batch naming column and key).
    * ``progress_metrics=True`` (default) puts each micro-batch's keyed-state metrics (elements, outputs, late
      elements, watermark, timers, keys, state bytes, bytes written, time in the function and in keyedstate, key
      group skew) into ``query.lastProgress["observedMetrics"]["keyedstate.<uid>"]``
      (:func:`keyedstate.spark.keyed_process_metrics_name`), where ``StreamingQueryListener`` s and Spark Connect
      clients read them (:class:`keyedstate.spark.PrometheusMetricsListener` exports them to Prometheus);
      docs/operations.md, "Monitoring", describes each one. Through Spark's ``DataFrame.observe``: evaluating a
      micro-batch's output twice (``foreachBatch`` without ``persist``) counts it twice.
    * ``emit_metrics=True`` also keeps the per-call rows the metrics are summed from in the output, as the side
      output ``keyedstate_metrics`` (``METRICS_SCHEMA_DDL``, one row per key-group call);
      ``side_output(stream, "keyedstate_metrics")`` selects it.
    * ``state_backend`` is fixed for the life of the checkpoint. ``"heap"`` (default, "row mode") keeps each key
      group's whole state and timers in its Spark state row: fastest while state is small, but every batch rewrites
      the state of every key group it touches. ``"rocksdb"`` keeps it in a local RocksDB per key group on the
      executors and writes durably only what changed (a changelog per key group and batch, and now and then a new
      incremental base snapshot) to ``state_storage``: per-batch cost follows what changed, not the total state.
      See docs/state-backends.md for when to choose which.
    * RocksDB mode only: ``state_storage`` is the durable location (a local path or any ``pyarrow.fs`` URI:
      ``s3://``, ``hdfs://``, ``gs://``; state goes below ``<state_storage>/<query id>/<uid>/``). Default: the local
      directory :func:`keyedstate.spark.rocksdb_mode.default_state_storage` (single machine, ``local[...]`` masters
      only; a cluster needs storage every executor reaches). ``state_storage_options`` (a dict) configures it:
      ``retry_seconds`` (default 60) is how long a read or write is retried while the storage is unreachable
      before the batch fails; for ``s3://``, credentials and endpoint come from the standard AWS environment
      (``AWS_ACCESS_KEY_ID``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``, roles, ...) unless given here
      (``endpoint_url``, ``access_key``, ``secret_key``, ``region``, any ``pyarrow.fs.S3FileSystem`` argument);
      see docs/operations.md. ``state_local_dir`` is where executors keep their
      local databases (default: ``$KEYEDSTATE_LOCAL_DIR``, else Spark's local dir, else the temp dir). ``uid``
      names the operator's state directories (default: the function's class ``__qualname__`` without ``<>``; a
      class whose name breaks the uid rule, such as ``_make.<locals>.Count``, gets a valid one derived from it):
      give two keyed_process of the same function class in one query different uids. A uid is 1-200 letters,
      digits, ``.``, ``_`` or ``-``, the first a letter or digit. ``rocksdb_options`` tunes RocksDB
      (:class:`keyedstate.RocksDBOptions`); ``snapshot_policy`` (:class:`keyedstate.spark.SnapshotPolicy`) says
      when a new base snapshot replaces changelogs.
    * ``state_storage`` in row mode (``"heap"``) holds only the record of the settings the committed state depends
      on (a few hundred bytes below ``<state_storage>/<query id>/<uid>/``), against which every restart is checked
      before it processes anything: a changed ``num_key_groups``, key type, backend, time mode, bootstrap or state
      declaration fails with :class:`~keyedstate.errors.RestartSettingsChangedError` (docs/operations.md,
      "Upgrading and rescaling a job"). Default as in RocksDB mode on ``local[...]`` masters; on a cluster give it.
    * ``initial_state`` (the path :func:`keyedstate.spark.bootstrap_keyed_state` wrote to, or what it returned)
      starts a new query from bootstrapped keyed state and timers: each key group's first call loads its state from
      there (read in the executors). Give it on every restart of that checkpoint too. Refused when the checkpoint
      already holds state that did not start from it, and when the bootstrap's ``state_backend``,
      ``num_key_groups`` or key column types differ from the query's.
    * ``job_parameters={"threshold": "10"}`` (strings) are what ``runtime_context.get_job_parameter(key, default)``
      returns in the function, as Flink's global job parameters; a restart may change them.
    * ``slow_call_warning_ms``: a key-group call that takes longer logs a WARNING on the worker (logger
      ``keyedstate.spark``) with its key group, batch, elements, timers and time in the function and in keyedstate.
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
    slow_call_warning_ms: Optional[int] = None

    def __post_init__(self) -> None:
        poll = self.processing_time_poll_interval_ms
        if not isinstance(poll, int) or isinstance(poll, bool) or poll <= 0:
            raise ConfigurationError("processing_time_poll_interval_ms must be a positive int of milliseconds")
        slow = self.slow_call_warning_ms
        if slow is not None and (not isinstance(slow, int) or isinstance(slow, bool) or slow <= 0):
            raise ConfigurationError(f"slow_call_warning_ms must be a positive int of milliseconds (or None), got "
                                     f"{slow!r}")
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
    def of(cls, call: str, options: Optional[KeyedProcessOptions], settings: Mapping[str, Any], *,
           accepted: Optional[Collection[str]] = None, **fixed: Any) -> KeyedProcessOptions:
        """The options of a call of the entry point ``call``: ``options`` (default: the defaults) with ``settings``,
        the call's keyword arguments named as the fields, replacing those fields. ``fixed`` are the fields the entry
        point sets itself, ``accepted`` (default: all) the only others it takes, from ``settings`` and ``options``."""
        names = [f.name for f in fields(cls) if f.name not in fixed and (accepted is None or f.name in accepted)]
        for name in settings:
            if name in fixed:
                raise ConfigurationError(f"{call} sets {name} itself; leave {name}={settings[name]!r} out")
            if name not in names:
                close = get_close_matches(name, names, n=1)
                raise ConfigurationError(
                    f"{call} got an unknown option {name!r}{f'; did you mean {close[0]!r}?' if close else '.'} "
                    f"The options {call} takes are KeyedProcessOptions' fields: {', '.join(names)}")
        if options is not None and not isinstance(options, cls):
            raise ConfigurationError(f"{call}: options must be a KeyedProcessOptions, got "
                                     f"{type(options).__qualname__}")
        base = options if options is not None else cls()
        return cls(**{**{name: getattr(base, name) for name in names}, **settings, **fixed})

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
