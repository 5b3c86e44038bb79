"""``bootstrap_keyed_state``: Flink's State Processor API writer on Spark. A ``KeyedStateBootstrapFunction`` runs
over a batch DataFrame and writes the initial keyed state a new ``keyed_process`` query starts from
(``initial_state=...``).

The DataFrame is grouped by key group with the key-group assignment ``keyed_process`` uses
(``pmod(xxhash64(key columns), num_key_groups)``), and each key group runs through the same group runtime, operator
and key-group store as a streaming call: its state row (heap) or version record (rocksdb) is written to a file
below ``path`` instead of Spark's state store. The driver collects one small row per key group (the file's name,
size and checksum, never state) and commits the bootstrap by writing ``_bootstrap.json`` last; see
:mod:`keyedstate.state.key_groups.initial_state` for the layout and how a query reads it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from keyedstate.api.bootstrap_function import KeyedStateBootstrapFunction
from keyedstate.api.time_domain import TimeDomain
from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, KeyedStateError
from keyedstate.spark.group_function import GroupRuntime, cached_runtime
from keyedstate.spark.group_spec import GroupFunctionSpec, create_store
from keyedstate.spark.key_group_layout import IDENTITY
from keyedstate.spark.metrics import CallMetrics
from keyedstate.spark.options import PROCESSING_TIME, KeyedProcessOptions
from keyedstate.spark.output_frames import OutputLayout
from keyedstate.spark.process import KEY_GROUP_COLUMN, add_key_group_column
from keyedstate.spark.schemas import check_key_columns
from keyedstate.spark.shipping import ShippedFunction
from keyedstate.spark_compat import check_arrow
from keyedstate.state.key_groups.initial_state import (
    KeyedStateBootstrap,
    encode_row,
    new_bootstrap_storage,
    storage_at,
    write_bootstrap_manifest,
)
from keyedstate.state.key_groups.row_format import StateRow

__all__ = ["bootstrap_keyed_state"]

_UID = "bootstrap"
_RESULT_SCHEMA = "key_group INT, entry STRING"
_STATE_FIELDS = ("num_key_groups", "state_backend", "state_storage_options", "state_local_dir", "rocksdb_options")


def bootstrap_keyed_state(
    df: DataFrame,
    key_columns: Sequence[str],
    bootstrap_function: KeyedStateBootstrapFunction,
    *,
    path: str,
    options: Optional[KeyedProcessOptions] = None,
    **settings: Any,
) -> KeyedStateBootstrap:
    """Run ``bootstrap_function`` over the batch DataFrame ``df`` keyed by ``key_columns`` and write the keyed state
    (and timers) it produces below ``path``; a new query starts from it with
    ``keyed_process(..., initial_state=path)`` (or the returned :class:`KeyedStateBootstrap`).

    * ``process_element(value, ctx)`` gets each row as a ``pyspark.sql.Row`` of ``df``'s columns, with its key
      current (``ctx.get_current_key()``, a tuple for several key columns); it writes state through handles from
      ``open(runtime_context)``, registered with the descriptors the query's function uses, and may register timers
      with ``ctx.timer_service()`` (they fire in the query). It emits nothing.
    * ``options`` (a :class:`KeyedProcessOptions`, such as the query's) and the keyword arguments (which replace
      its fields) give the state fields only: ``num_key_groups`` and ``state_backend`` (``"heap"`` or
      ``"rocksdb"``) must be the query's; the key columns must have the query's key column types (a key's key group
      depends on them).
    * ``path`` is a local path or ``pyarrow.fs`` URI (``s3://...``) the query's executors can read, configured by
      ``state_storage_options`` (as keyed_process's); it must not hold a bootstrap yet. The query only reads it:
      keep it as long as a checkpoint started from it lives (key groups load it on their first call).
    * RocksDB only: ``state_local_dir`` and ``rocksdb_options`` as keyed_process's (where executors build the
      databases before storing them, and how RocksDB is tuned).
    """
    check_arrow()
    if not isinstance(bootstrap_function, KeyedStateBootstrapFunction):
        raise ConfigurationError(f"bootstrap_function must be a KeyedStateBootstrapFunction instance, got "
                                 f"{type(bootstrap_function).__qualname__}")
    if df.isStreaming:
        raise ConfigurationError("bootstrap_keyed_state reads a batch DataFrame (spark.read...), not a streaming one; "
                                 "the streaming query starts from its output with keyed_process(initial_state=...)")
    check_key_columns(df, key_columns)
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ConfigurationError(f"path must be a path or URI string, got {path!r}")
    options = KeyedProcessOptions.of(
        "bootstrap_keyed_state", options, settings, accepted=_STATE_FIELDS, time_mode=PROCESSING_TIME,
        key_group_layout=IDENTITY, progress_metrics=False, state_storage=os.fspath(path), uid=_UID)
    num_key_groups = options.num_key_groups
    if num_key_groups is None:
        raise ConfigurationError("bootstrap_keyed_state writes key groups: num_key_groups=None (grouping by the user "
                                 "key) has none; bootstrap a query that uses key groups")
    storage = new_bootstrap_storage(os.fspath(path), options.storage_options)
    types = {field.name: field.dataType.simpleString() for field in df.schema.fields}
    job = _BootstrapJob.create(bootstrap_function, options, tuple((c, types[c]) for c in key_columns),
                               tuple(df.columns))
    prepared = add_key_group_column(df, key_columns, num_key_groups, key_group_layout=IDENTITY)
    results = prepared.groupBy(KEY_GROUP_COLUMN).applyInPandas(_group_function(job), _RESULT_SCHEMA).collect()
    return job.commit(storage, [(row["key_group"], row["entry"]) for row in results])


@dataclass(frozen=True)
class _BootstrapJob:
    spec: GroupFunctionSpec
    function: ShippedFunction
    bootstrap_id: str
    path: str
    key_columns: tuple[tuple[str, str], ...]  # (name, Spark type)
    now_ms: int  # the TTL clock of the writes: when the bootstrap started

    @classmethod
    def create(cls, function: KeyedStateBootstrapFunction, options: KeyedProcessOptions,
               key_columns: tuple[tuple[str, str], ...], value_columns: tuple[str, ...]) -> "_BootstrapJob":
        """``options``: where (``state_storage``) and how the state is written."""
        bootstrap_id = uuid.uuid4().hex
        spec = GroupFunctionSpec(
            runtime_id=f"bootstrap-{bootstrap_id}", key_columns=tuple(name for name, _ in key_columns),
            value_columns=value_columns, key_group_column=KEY_GROUP_COLUMN, event_time_ms_column=None,
            layout=OutputLayout(StructType([])), options=options,
        )
        shipped = ShippedFunction(function)
        shipped.check()  # an attribute that cannot be pickled is named now, not in Spark's stack trace
        assert options.state_storage is not None
        return cls(spec, shipped, bootstrap_id, options.state_storage, key_columns, time.time_ns() // 1_000_000)

    def commit(self, storage: CheckpointStorage, results: Sequence[tuple[int, Optional[str]]]) -> KeyedStateBootstrap:
        """Write the manifest naming every key group's row file (``results``: what the group calls returned)."""
        rows = {int(key_group): FileEntry.from_json(json.loads(entry)) for key_group, entry in results
                if entry is not None}
        options = self.spec.options
        bootstrap = KeyedStateBootstrap(self.path, self.bootstrap_id, options.state_backend, self.spec.num_key_groups,
                                        self.key_columns, len(rows), options.storage_options)
        write_bootstrap_manifest(storage, bootstrap, self.function.class_name, rows, self.now_ms)
        return bootstrap


def _group_function(job: _BootstrapJob) -> Any:
    def bootstrap_group(key: tuple, frame: pd.DataFrame) -> pd.DataFrame:
        return _runtime(job).bootstrap(int(key[0]), frame)

    return bootstrap_group


def _runtime(job: _BootstrapJob) -> "_BootstrapRuntime":
    return cached_runtime(job.spec.runtime_id, lambda: _BootstrapRuntime(job))


class _CapturedRow:
    """Stands in for Spark's GroupState: the key group has no committed row, and the row the store writes is kept."""

    exists = False

    def __init__(self) -> None:
        self.row: Optional[StateRow] = None

    def update(self, row: tuple) -> None:
        self.row = StateRow.from_row(row)

    def remove(self) -> None:
        self.row = None


class _BootstrapRuntime:
    """The streaming group runtime, run once per key group of the batch, with no time passing."""

    def __init__(self, job: _BootstrapJob) -> None:
        self.job = job
        # one local directory per worker process and bootstrap: no other process ever opens its databases
        self.scope = (f"bootstrap-{job.bootstrap_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}", job.path)
        self.runtime = GroupRuntime(
            job.spec, job.function.get(), call_name="bootstrap_keyed_state",
            make_store=lambda spec, clock: create_store(spec, clock, keep_open=False, scope=self.scope))

    def bootstrap(self, key_group: int, frame: pd.DataFrame) -> pd.DataFrame:
        where = f"bootstrap_keyed_state key group {key_group}"
        runtime = self.runtime
        operator, store = runtime.operator, runtime.store
        runtime.enter_task()
        runtime.clock.now_ms = self.job.now_ms
        timers = operator.internal_timer_service
        captured = _CapturedRow()
        succeeded = False
        try:
            store.load(key_group, captured, None, timers)
            if not frame.empty:
                runtime.process_elements(key_group, frame, where, None, CallMetrics())  # bootstraps report no metrics
            records, _ = operator.outputs.drain()
            if records or operator.outputs.drain_all_side():
                raise ConfigurationError(
                    f"{operator.function_name}.process_element emitted output; a KeyedStateBootstrapFunction "
                    f"only writes state and registers timers (nothing would read its output)")
            has_timers = any(timers.earliest_timer(domain, key_group) is not None for domain in TimeDomain)
            store.save(key_group, captured, None, timers, has_timers)
            succeeded = True
        except KeyedStateError as error:
            if str(error).startswith(where):
                raise
            raise type(error)(f"{where}: {error}") from error
        finally:
            runtime.release_group(key_group, succeeded)
            self._remove_local(key_group)
        entry = None
        if captured.row is not None:
            name = f"kg-{key_group:05d}-{uuid.uuid4().hex[:16]}.row"
            written = self.store_storage().write_bytes(f"rows/{name}", encode_row(captured.row), name)
            entry = json.dumps(written.to_json())
        return pd.DataFrame({"key_group": [key_group], "entry": [entry]})

    def store_storage(self) -> CheckpointStorage:
        return storage_at(self.job.path, self.job.spec.options.storage_options)

    def _remove_local(self, key_group: int) -> None:
        """The local database was only a staging area: what it holds is stored below ``path`` now."""
        local = getattr(getattr(self.runtime.store, "copies", None), "local", None)
        if local is not None:
            database = local.path(self.scope[0], _UID, key_group)
            shutil.rmtree(database, ignore_errors=True)
            try:
                os.remove(database + ".lock")
            except OSError:
                pass
