"""The function applyInPandasWithState calls for each key group (runs in Spark's Python workers).

One call = one key group in one micro-batch: load the group's state (the key-group store of the query's state
backend: :mod:`keyedstate.state.key_groups.row_store` or :mod:`keyedstate.spark.rocksdb_mode`) -> fire due timers
(event time, then processing time) -> process the batch's elements key by key, each key's elements in event-time
order -> fire processing-time timers that became due -> save the group's row and mirror the earliest timer into
Spark's single timeout (or remove the row when the group holds nothing) -> release the group. The row is the commit
record: Spark's state store snapshots it per micro-batch, so a failed or repeated task starts again from the
previous batch's row.
"""

from __future__ import annotations

import gc
import logging
import warnings
from time import perf_counter
from typing import Any, Callable, Iterator, Optional, TypeVar

import numpy as np
import pandas as pd

from keyedstate.api.time_domain import MIN_WATERMARK, TimeDomain
from keyedstate.checkpoint.locations import join_location
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, KeyedStateError, NullKeyError
from keyedstate.operator.keyed_process import KeyedProcessOperator
from keyedstate.operator.output_buffer import OutputBuffer
from keyedstate.serialization import encode_key, encode_keys_with_prefix
from keyedstate.spark.group_elements import (
    ElementColumns,
    column_values,
    first_null,
    group_order,
    key_codes,
    rows_builder,
)
from keyedstate.spark.group_spec import GroupFunctionSpec, create_store
from keyedstate.spark.key_group_layout import key_group_of_grouping_value
from keyedstate.spark.metrics import METRICS_TAG, CallMetrics
from keyedstate.spark.options import EVENT_TIME
from keyedstate.spark.query_settings import check_restart_settings, operator_storage_location
from keyedstate.spark.shipping import ShippedFunction
from keyedstate.spark_compat import (
    current_batch_id,
    current_query_id,
    freeze_worker_startup_objects,
    task_attempt_number,
    task_partition_id,
    watermark_or_none,
)
from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.base.kinds import HEAP
from keyedstate.state.base.layout import key_group_prefix
from keyedstate.state.key_groups.row_format import StateRow
from keyedstate.state.key_groups.store import KeyGroupStore, check_recorded_key_groups

__all__ = ["GroupRuntime", "make_group_function", "cached_runtime"]

logger = logging.getLogger("keyedstate.spark")

LARGE_ROW_BYTES = 1024 * 1024
"""A row-mode state row past this is rewritten whole at every batch that touches its key group: the cliff RocksDB
mode avoids (docs/state-backends.md). About 128 MiB of state with the default 128 key groups."""


class _BatchClock:
    """Processing time (and the TTL clock) is the micro-batch timestamp: constant in a batch, stable on replay."""

    __slots__ = ("now_ms",)

    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


class GroupRuntime:
    """The per-worker-process machinery of one query: one opened function, one operator, one key-group store (and
    its backend) reused for every key group the worker runs."""

    def __init__(self, spec: GroupFunctionSpec, function: Any,
                 make_store: Optional[Callable[[GroupFunctionSpec, Any], KeyGroupStore]] = None,
                 call_name: Optional[str] = None) -> None:
        """``make_store(spec, clock)`` creates the key-group store (default :func:`create_store`); ``call_name``
        names the entry point in errors (default: keyed_process or keyed_co_process)."""
        self.spec = spec
        self.clock = _BatchClock()
        self.store = (make_store or create_store)(spec, self.clock)
        self.backend = self.store.backend
        call = self.call_name = call_name or ("keyed_process" if spec.inputs is None else "keyed_co_process")
        self.operator = KeyedProcessOperator(
            function, self.backend, task_name=f"{call}[{type(function).__qualname__}]", **self._task_info(),
            job_parameters=spec.options.job_parameters,
        )
        self.operator.open()
        self.build_values = _values_builder(spec)
        # PySpark's worker concatenates the calls' output frames; a frame whose columns are all null (the main
        # columns of a metrics row, the metrics column of main rows) makes pandas warn about a dtype rule it will
        # change. The declared Arrow schema decides the types, so the warning says nothing about keyedstate's output.
        warnings.filterwarnings("ignore", category=FutureWarning,
                                message="The behavior of DataFrame concatenation with empty or all-NA entries")
        self.single_key = len(spec.key_columns) == 1
        self._checked_queries: set[str] = set()
        self._warned_large_row = spec.options.state_backend != HEAP

    def run(self, grouping_key: tuple, frames: Iterator[pd.DataFrame], group_state: Any) -> Iterator[pd.DataFrame]:
        batch_id = current_batch_id()
        self._check_restart(batch_id, bool(group_state.exists))
        self.enter_task()
        key_group = self._key_group(grouping_key, group_state, batch_id)
        where = f"{self.call_name} key group {key_group}, batch {batch_id}"
        # A call allocates a few objects per element, most of them long-lived (rows, state entries, timers), so the
        # cyclic GC would run full collections over them again and again; reference counting frees what the call
        # drops, and cycles (if any) are collected after the call.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        succeeded = False
        try:
            outputs = self._run(key_group, frames, group_state, batch_id, where)
            succeeded = True
        except KeyedStateError as error:
            if str(error).startswith(where):  # raised with the location already (output conversion)
                raise
            raise type(error)(f"{where}: {error}") from error
        finally:
            try:
                self.release_group(key_group, succeeded)
            finally:
                if gc_was_enabled:
                    gc.enable()
        for output in outputs:
            if not output.empty:
                yield output

    def _check_restart(self, batch_id: Optional[int], holds_state: bool) -> None:
        """Before this worker process runs anything of a query: are the committed state's settings still ours?
        ``holds_state``: whether the called key group has a committed state row."""
        query_id = current_query_id()
        spec = self.spec
        options = spec.options
        if query_id is None or query_id in self._checked_queries or options.state_storage is None:
            return
        assert options.uid is not None  # resolve_state_backend filled it in
        storage = CheckpointStorage(operator_storage_location(options.state_storage, query_id, options.uid),
                                    options=options.state_storage_options)
        backend = self.backend
        descriptors = [backend.registered_state(name).descriptor for name in backend.registered_state_names()]
        starting = spec.initial_state.recorded_states if spec.initial_state is not None else ()
        backend.state_incarnations = check_restart_settings(
            storage, spec.restart_settings(), descriptors, batch_id, self.call_name,
            starting_states=[StateMetadata.from_json(state) for state in starting],
            query_storage=CheckpointStorage(join_location(options.state_storage, query_id),
                                            options=options.state_storage_options), uid=options.uid,
            holds_state=holds_state)
        self._checked_queries.add(query_id)

    def enter_task(self) -> None:
        """Point the function's runtime context at the Spark task running now."""
        self.operator.runtime_context.move_to_task(**self._task_info())

    def _task_info(self) -> dict[str, int]:
        """The running task, for the runtime context: one opened function serves every task of this worker."""
        partition = task_partition_id()
        return {
            "index_of_this_subtask": partition,
            "number_of_parallel_subtasks": max(self.spec.parallelism, partition + 1),
            "attempt_number": task_attempt_number(),
        }

    def _key_group(self, grouping_key: tuple, group_state: Any, batch_id: Optional[int]) -> int:
        spec = self.spec
        # Grouped by the user key itself, every Spark group is a single key and the backend has one key group.
        if spec.options.num_key_groups is None:
            return 0
        layout = spec.options.key_group_layout
        key_group = key_group_of_grouping_value(int(grouping_key[0]), spec.num_key_groups, layout)
        if key_group is None:
            # After a restart with fewer key groups, Spark still wakes the rows of the key groups that are gone: the
            # row's recorded number says what really happened.
            if group_state.exists:
                try:
                    check_recorded_key_groups(StateRow.from_row(group_state.get), spec.num_key_groups)
                except ConfigurationError as error:
                    raise ConfigurationError(f"keyed_process batch {batch_id}: {error}") from None
            raise ConfigurationError(
                f"keyed_process batch {batch_id}: the grouping value {grouping_key[0]!r} of column "
                f"{spec.key_group_column!r} is not one that key_group_layout={layout!r} with "
                f"num_key_groups={spec.num_key_groups} produces; group by the column add_key_group_column adds, "
                f"with the same num_key_groups and key_group_layout"
            )
        return key_group

    def _run(self, key_group: int, frames: Iterator[pd.DataFrame], group_state: Any, batch_id: Optional[int],
             where: str) -> list[pd.DataFrame]:
        started = perf_counter()
        operator = self.operator
        timers = operator.internal_timer_service
        fired_before = operator.timers_fired
        processed_before = operator.elements_processed
        timer_counts = operator.user_timer_service.timer_counts
        registered_before, deleted_before = timer_counts()
        metrics = CallMetrics()
        now = int(group_state.getCurrentProcessingTimeMs())
        self.clock.now_ms = now  # before the load: TTL turned on stamps migrated entries with this time
        self.store.load(key_group, group_state, batch_id, timers)
        self.backend.settle_restored_states()  # migrate older layouts, drop removed states: before any user code
        loaded = perf_counter()
        metrics.restore_s = loaded - started
        watermark = watermark_or_none(group_state)
        initial = self.spec.initial_state
        if watermark is not None and initial is not None and initial.watermark_ms is not None:
            # a query started from a savepoint continues the old query's watermark (Spark's starts again at 0)
            watermark = max(watermark, initial.watermark_ms)
        self._note_timer_lag(key_group, now, metrics)
        operator.advance_watermark(MIN_WATERMARK if watermark is None else watermark)
        operator.advance_processing_time(now)
        metrics.timer_s = perf_counter() - loaded
        elements = [frame for frame in frames if not frame.empty]
        if elements:
            batch = elements[0] if len(elements) == 1 else pd.concat(elements, ignore_index=True)
            self.process_elements(key_group, batch, where, watermark, metrics)
        self._note_timer_lag(key_group, now, metrics)
        firing = perf_counter()
        operator.advance_processing_time(now)
        metrics.timer_s += perf_counter() - firing
        self.store.cleanup_expired_state()
        keys_with_state = self.store.keys_with_state() if self.spec.emits_metrics else 0
        written = self._persist(key_group, group_state, batch_id, watermark, now)
        if written > LARGE_ROW_BYTES and not self._warned_large_row:
            self._warned_large_row = True
            logger.warning('%s key group %d, batch %s: row mode (state_backend="heap") rewrites this key group\'s '
                           "whole state, %.1f MiB, in its Spark state row at every batch that touches it. If a "
                           'batch changes a small part of the state, state_backend="rocksdb" writes only what '
                           "changed (docs/state-backends.md); a savepoint moves a running job over. Logged once "
                           "per Python worker.", self.call_name, key_group, batch_id, written / (1024 * 1024))
        marks = operator.outputs.key_marks
        records, _ = operator.outputs.drain()
        side = operator.outputs.drain_all_side()
        call_s = perf_counter() - started
        processed, fired = operator.elements_processed - processed_before, operator.timers_fired - fired_before
        slow_ms = self.spec.options.slow_call_warning_ms
        if slow_ms is not None and call_s * 1000 > slow_ms:
            user_s = metrics.process_s + metrics.timer_s
            logger.warning("%s key group %d, batch %s: the call took %.1f ms (slow_call_warning_ms=%d) for %d "
                           "elements and %d timers: %.1f ms in the user function, %.1f ms in keyedstate",
                           self.call_name, key_group, batch_id, call_s * 1000, slow_ms, processed, fired,
                           user_s * 1000, (call_s - user_s) * 1000)
        if self.spec.emits_metrics:
            outputs = len(records) + sum(len(values) for values in side.values())
            registered, deleted = timer_counts()
            side.setdefault(METRICS_TAG, []).append((metrics.row(
                key_group, elements=processed, outputs=outputs, watermark=watermark, timers_fired=fired,
                timers_registered=registered - registered_before, timers_deleted=deleted - deleted_before,
                pending_timers=timers.num_event_time_timers(key_group) + timers.num_processing_time_timers(key_group),
                keys_with_state=keys_with_state, state_bytes=self.store.state_bytes(written), bytes_written=written,
                base_bytes_written=self.store.base_bytes_written, call_s=call_s,
            ), None))
        if not records and not side:
            return []
        return self.spec.layout.to_frames(records, side, f"{where}, output of {operator.function_name}",
                                          lambda index: OutputBuffer.key_of(marks, index))

    def _note_timer_lag(self, key_group: int, now: int, metrics: CallMetrics) -> None:
        """Before processing time advances to ``now``: how late the oldest due processing-time timer fires."""
        if self.spec.emits_metrics:
            due = self.operator.internal_timer_service.earliest_timer(TimeDomain.PROCESSING_TIME, key_group)
            if due is not None and due.timestamp <= now:
                metrics.timer_lag_ms = max(metrics.timer_lag_ms or 0, now - due.timestamp)

    def process_elements(self, key_group: int, batch: pd.DataFrame, where: str, watermark: Optional[int],
                         metrics: CallMetrics) -> None:
        """Run the function over ``batch`` (the key group's elements), key by key, each key's elements in event-time
        order; ``where`` locates the call in errors."""
        spec = self.spec
        columns = ElementColumns(batch, spec.micros_columns)
        key_columns = list(spec.key_columns)
        key_series = [columns[c] for c in key_columns]
        codes, null = key_codes(key_series)
        if null is not None:
            row = columns.values_at(null, key_columns)
            raise NullKeyError(
                f"an element has a null key ({row}); keyed state needs non-null keys. Filter out or fill null "
                f"keys before {self.call_name}"
            )
        time_column = spec.event_time_ms_column
        times: Optional[np.ndarray] = None
        if time_column is not None:
            time_series = columns[time_column]
            null = first_null(time_series)
            if null is not None:
                row = columns.values_at(null, key_columns)
                raise ConfigurationError(
                    f"an element of key {row} has a null event time; drop or fill null event times before "
                    f"{self.call_name}"
                )
            times = np.asarray(time_series).astype("int64", copy=False)
            if watermark is not None:
                metrics.late_elements = int(np.count_nonzero(times < watermark))
        order, starts = group_order(codes, times)
        ends = starts[1:] + [len(order)]
        firsts = order[starts]
        # converted like the values, so a timestamp key is the same datetime here and in on_timer (decoded)
        if self.single_key:
            keys = column_values(key_series[0], firsts)
        else:
            keys = list(zip(*(column_values(series, firsts) for series in key_series)))
        timestamps = [None] * len(order) if times is None else times[order].tolist()
        values, input_indexes = self.build_values(columns, order)
        prefix = key_group_prefix(key_group)
        if not self.backend.key_group_range.start <= key_group <= self.backend.key_group_range.end:
            self.backend.set_current_key_in_group(keys[0], encode_key(keys[0]), key_group)  # raises
        runs = zip(keys, encode_keys_with_prefix(prefix, keys), starts, ends)
        started = perf_counter()
        try:
            self.operator.process_key_runs(runs, values, timestamps, input_indexes)
        finally:
            metrics.process_s = perf_counter() - started
            self.backend.clear_current_key()

    def _persist(self, key_group: int, group_state: Any, batch_id: Optional[int], watermark: Optional[int],
                 now: int) -> int:
        """Write the row (or remove it) and Spark's timeout; returns the bytes written durably."""
        timers = self.operator.internal_timer_service
        has_timers = (timers.earliest_timer(TimeDomain.EVENT_TIME, key_group) is not None
                      or timers.earliest_timer(TimeDomain.PROCESSING_TIME, key_group) is not None)
        kept, written = self.store.save(key_group, group_state, batch_id, timers, has_timers)
        if not kept:
            return 0
        # update() clears Spark's timeout, so it is set again on every call.
        if self.spec.options.time_mode == EVENT_TIME:
            earliest = timers.earliest_timer(TimeDomain.EVENT_TIME, key_group)
            if earliest is not None:
                floor = max(watermark or 0, 1)
                # Spark fires when timeout < watermark; ours fire when timestamp <= watermark, hence -1.
                group_state.setTimeoutTimestamp(max(earliest.timestamp - 1, floor))
        else:
            delays = []
            earliest = timers.earliest_timer(TimeDomain.PROCESSING_TIME, key_group)
            if earliest is not None:
                delays.append(earliest.timestamp - 1 - now)
            if timers.earliest_timer(TimeDomain.EVENT_TIME, key_group) is not None:
                delays.append(self.spec.options.processing_time_poll_interval_ms)
            if delays:
                group_state.setTimeoutDuration(max(1, min(delays)))
        return written

    def release_group(self, key_group: int, succeeded: bool) -> None:
        """End the call of ``key_group``: release its state (committed or, unless ``succeeded``, rolled back) and
        drop output the call did not hand over."""
        self.backend.clear_current_key()
        self.store.finish(key_group, self.operator.internal_timer_service, succeeded)
        self.operator.outputs.drain()
        self.operator.outputs.drain_all_side()


def _values_builder(spec: GroupFunctionSpec) -> Callable[[ElementColumns, np.ndarray], tuple[list[Any], Any]]:
    """``(columns, order) -> (values, input indexes)``: the elements' records in ``order``, and which input each
    came from (None for one input)."""
    if spec.inputs is not None:
        return spec.inputs.values_builder()
    build_rows = rows_builder(spec.value_columns)
    return lambda columns, order: (build_rows([column_values(columns[c], order) for c in spec.value_columns]), None)


_RUNTIMES: dict[str, Any] = {}
_Runtime = TypeVar("_Runtime")


def make_group_function(spec: GroupFunctionSpec, function: Any) -> Any:
    """The callable for ``applyInPandasWithState``; the runtime is created once per worker process and query.
    ``function`` is a ``KeyedProcessFunction`` or its :class:`ShippedFunction`."""
    shipped = function if isinstance(function, ShippedFunction) else ShippedFunction(function)

    def keyed_group_function(grouping_key: tuple, frames: Iterator[pd.DataFrame],
                             group_state: Any) -> Iterator[pd.DataFrame]:
        return _runtime(spec, shipped).run(grouping_key, frames, group_state)

    return keyed_group_function


def _runtime(spec: GroupFunctionSpec, shipped: ShippedFunction) -> GroupRuntime:
    return cached_runtime(spec.runtime_id, lambda: GroupRuntime(spec, shipped.get()))


def cached_runtime(runtime_id: str, create: Callable[[], _Runtime]) -> _Runtime:
    """This worker process's runtime ``runtime_id``, created by ``create()`` at its first call.

    Shipped closures call this module-level function rather than naming ``_RUNTIMES``: a closure naming the dict
    would ship the driver's copy by value, with every runtime a driver-side call ever created. The worker's startup
    objects are frozen before the first runtime is created, so the runtimes themselves (their databases' handles
    among them) stay with the collector."""
    runtime = _RUNTIMES.get(runtime_id)
    if runtime is None:
        freeze_worker_startup_objects()
        runtime = _RUNTIMES[runtime_id] = create()
    return runtime
