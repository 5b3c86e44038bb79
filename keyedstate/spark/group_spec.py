"""``GroupFunctionSpec``: what a worker needs to run a query's key groups, built on the driver and shipped with the
group function; and the key-group store of its state backend (:func:`create_store`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from keyedstate.spark.metrics import METRICS_TAG
from keyedstate.spark.options import KeyedProcessOptions
from keyedstate.spark.output_frames import OutputLayout
from keyedstate.spark.query_settings import QuerySettings
from keyedstate.state.base.kinds import HEAP
from keyedstate.state.key_groups.initial_state import InitialState
from keyedstate.state.key_groups.store import KeyGroupStore

if TYPE_CHECKING:
    from keyedstate.spark.co_process import TwoInputColumns

__all__ = ["GroupFunctionSpec", "create_store"]


@dataclass(frozen=True)
class GroupFunctionSpec:
    """Everything a worker needs to run a key group; built on the driver by ``keyed_process``."""

    runtime_id: str
    key_columns: tuple[str, ...]
    value_columns: tuple[str, ...]
    key_group_column: str
    event_time_ms_column: Optional[str]
    layout: OutputLayout  # the output struct; a call emits metric rows when it has the metrics side output
    options: KeyedProcessOptions = KeyedProcessOptions()  # resolved on the driver: uid and state_storage filled in
    parallelism: int = 1  # spark.sql.shuffle.partitions when the query was defined
    retain_batches: int = 100  # spark.sql.streaming.minBatchesToRetain
    inputs: Optional[TwoInputColumns] = None  # two inputs: which columns hold whose values (value_columns unused)
    initial_state: Optional[InitialState] = None  # what key groups start from (resolved options.initial_state)
    micros_columns: tuple[str, ...] = ()  # timestamp columns sent as microseconds (keyedstate.spark.timestamps)
    key_types: tuple[str, ...] = ()  # the key columns' Spark types (simpleString), in order

    @property
    def num_key_groups(self) -> int:
        """The backend's number of key groups."""
        return self.options.num_key_groups or 1

    @property
    def emits_metrics(self) -> bool:
        return METRICS_TAG in self.layout.side_schemas

    def restart_settings(self) -> QuerySettings:
        """What this operator's committed state depends on (checked against the record when a query restarts)."""
        options = self.options
        return QuerySettings(
            key_types=self.key_types, num_key_groups=options.num_key_groups,
            key_group_layout=options.key_group_layout, state_backend=options.state_backend,
            time_mode=options.time_mode,
            initial_state=self.initial_state.bootstrap_id if self.initial_state is not None else None)


def create_store(spec: GroupFunctionSpec, clock: Any, **rocksdb_arguments: Any) -> KeyGroupStore:
    """The key-group store of ``spec``'s state backend, on the TTL clock ``clock``; ``rocksdb_arguments`` go to
    :func:`keyedstate.spark.rocksdb_mode.rocksdb_store` (where a bootstrap writes, whether databases stay open)."""
    options = spec.options
    if options.state_backend == HEAP:
        from keyedstate.state.key_groups.row_store import RowKeyGroupStore

        return RowKeyGroupStore(spec.num_key_groups, clock, initial_state=spec.initial_state)
    from keyedstate.spark.rocksdb_mode import rocksdb_store

    assert options.state_storage is not None and options.uid is not None
    return rocksdb_store(
        spec.num_key_groups, clock, state_storage=options.state_storage,
        storage_options=options.storage_options,
        local_dir=options.state_local_dir, uid=options.uid, options=options.rocksdb_options,
        policy=options.snapshot_policy, retain_batches=spec.retain_batches, initial_state=spec.initial_state,
        **rocksdb_arguments,
    )
