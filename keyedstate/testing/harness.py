"""``KeyedProcessHarness``: run a ``KeyedProcessFunction`` in-process, without Spark, and inspect everything.

The Python counterpart of Flink's ``KeyedOneInputStreamOperatorTestHarness``. It drives the same operator core the
Spark integration uses, so a function that behaves here behaves the same on Spark (up to the micro-batch
differences documented in docs/concepts.md).

    harness = KeyedProcessHarness(CountWithTimeout(), key_selector=lambda e: e["user"])
    harness.open()
    harness.process_element({"user": "a"}, timestamp=1_000)
    harness.process_watermark(61_000)
    assert harness.extract_output() == [("a", 1)]
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from typing import Any, Callable, Optional, Sequence, Union

from keyedstate.api.process_function import KeyedProcessFunction
from keyedstate.api.time_domain import MAX_WATERMARK, OutputTag
from keyedstate.errors import ConfigurationError, KeyedStateError
from keyedstate.key_types import KeyTypeSpec, key_column_types
from keyedstate.keygroups import key_group_assigner, key_group_range_for_partition, num_key_groups_or_alias
from keyedstate.operator.keyed_process import KeyedProcessOperator
from keyedstate.state.base.backend import KeyedStateBackend
from keyedstate.state.base.kinds import HEAP, ROCKSDB
from keyedstate.state.descriptors import StateDescriptor
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.testing.clock import ManualClock
from keyedstate.testing.snapshots import HarnessSnapshot, harness_store
from timers import to_epoch_millis, to_time_bound

__all__ = ["KeyedProcessHarness", "HarnessSnapshot", "KeyedHarnessBase", "key_selector_function", "require_function"]

logger = logging.getLogger("keyedstate.testing.harness")

BackendChoice = Union[str, KeyedStateBackend]

# Temporary checkpoint directories of closed harnesses whose snapshots another harness may still restore: a snapshot
# lives only in this process, so its files go when the process ends (not with the harness).
_KEPT_TEMPORARY_CHECKPOINTS: list[str] = []


@atexit.register
def _remove_kept_temporary_checkpoints() -> None:
    for path in _KEPT_TEMPORARY_CHECKPOINTS:
        shutil.rmtree(path, ignore_errors=True)


def key_selector_function(selector: Any, what: str = "key_selector") -> Callable[[Any], Any]:
    """``selector`` (a callable or a PyFlink ``KeySelector``) as a plain function ``value -> key``."""
    get_key = getattr(selector, "get_key", None)  # PyFlink's KeySelector
    if callable(get_key):
        return get_key
    if callable(selector):
        return selector
    raise ConfigurationError(
        f"{what} must be a callable (lambda value: value['user']) or a KeySelector with get_key(), "
        f"got {type(selector).__qualname__}"
    )


def require_function(function: Any, kind: type, harness: str, other_harness: str) -> None:
    """Refuse a function of the wrong kind now, rather than at the first element."""
    if not isinstance(function, kind):
        raise ConfigurationError(
            f"{harness} runs a {kind.__name__}, got {type(function).__qualname__}; subclass keyedstate."
            f"{kind.__name__} (or use {other_harness} for the other kind of function)"
        )


class KeyedHarnessBase:
    """What the one- and two-input harnesses share: the backend, the operator, processing time, output, state
    inspection, snapshots and closing. The subclasses add how elements and watermarks come in."""

    def __init__(
        self,
        function: Any,
        *,
        backend: BackendChoice = HEAP,
        num_key_groups: Optional[int] = None,
        key_types: Optional[Sequence[KeyTypeSpec]] = None,
        partition: int = 0,
        partitions: int = 1,
        checkpoint_dir: Optional[str] = None,
        initial_processing_time: int = 0,
        max_parallelism: Optional[int] = None,
    ) -> None:
        # the user's call is three frames up: the subclass's __init__, then this one
        num_key_groups = num_key_groups_or_alias(num_key_groups, max_parallelism, type(self).__name__, stacklevel=3)
        # Declared types are checked now (a typo fails here, not at the first element); kept as DDL names.
        self.key_types = None if key_types is None else tuple(str(t) for t in key_column_types(key_types))
        self._clock = ManualClock(initial_processing_time)
        self._temp_dirs: list[str] = []
        self._checkpoint_dir = checkpoint_dir or self._temp_dir("keyedstate-harness-checkpoints-")
        self.partition = partition
        self.partitions = partitions
        key_group_range = key_group_range_for_partition(partition, partitions, num_key_groups)
        self.backend = self._make_backend(backend, num_key_groups, key_group_range)
        if self.key_types is not None:
            self.backend.key_group_of_key = key_group_assigner(self.backend.num_key_groups, self.key_types)
        self._store: Any = None  # the save/restore step of the backend (created at the first snapshot or restore)
        self._checkpoint_id = 0
        self._function = function
        self.operator: Optional[KeyedProcessOperator] = None
        self._opened = False

    # ---- setup -----------------------------------------------------------------------------------------------------

    def _temp_dir(self, prefix: str) -> str:
        path = tempfile.mkdtemp(prefix=prefix)
        self._temp_dirs.append(path)
        return path

    def _make_backend(self, choice: BackendChoice, num_key_groups: int, key_group_range: Any) -> KeyedStateBackend:
        if isinstance(choice, KeyedStateBackend):
            return choice
        if choice == HEAP:
            return HeapKeyedStateBackend(
                num_key_groups=num_key_groups, key_group_range=key_group_range, ttl_clock=self._clock,
            )
        if choice == ROCKSDB:
            from keyedstate.state.rocksdb import RocksDBKeyedStateBackend

            # Its writes are recorded, so a snapshot stores per key group only what changed (see snapshots.py).
            return RocksDBKeyedStateBackend(
                self._temp_dir("keyedstate-harness-rocksdb-"), num_key_groups=num_key_groups,
                key_group_range=key_group_range, ttl_clock=self._clock, record_changes=True,
            )
        raise ConfigurationError(f"backend must be 'heap', 'rocksdb' or a KeyedStateBackend, got {choice!r}")

    def open(self) -> Any:
        """Create the operator and call the function's ``open``. Returns the harness."""
        if not self._opened:
            operator = self._created_operator()
            operator.open()
            self._opened = True
            operator.advance_processing_time(self._clock())
        return self

    def _created_operator(self) -> KeyedProcessOperator:
        """The operator (and its timer service), created but not opened: a restore loads into it first."""
        if self.operator is None:
            self.operator = KeyedProcessOperator(
                self._function, self.backend, index_of_this_subtask=self.partition,
                number_of_parallel_subtasks=self.partitions,
            )
        return self.operator

    def _persistence(self) -> Any:
        if self._store is None:
            self._store = harness_store(self.backend, self._checkpoint_dir)
        return self._store

    def _operator(self) -> KeyedProcessOperator:
        if self.operator is None or not self._opened:
            raise KeyedStateError("the harness is not open: call harness.open() first")
        return self.operator

    # ---- input -----------------------------------------------------------------------------------------------------

    def _process(self, key: Any, value: Any, timestamp: Optional[int], input_index: int) -> None:
        if timestamp is not None:
            timestamp = to_epoch_millis(timestamp, "element timestamp")
        self._operator().process_element(key, value, timestamp, input_index)

    def _advance_watermark(self, watermark: int) -> int:
        return self._operator().advance_watermark(watermark)

    def set_processing_time(self, time_ms: int) -> int:
        """Move processing time (and the TTL clock) to ``time_ms``; fires due processing-time timers."""
        time_ms = to_epoch_millis(time_ms, "processing time")
        self._clock.set(time_ms)
        return self._operator().advance_processing_time(time_ms)

    # ---- output and inspection -------------------------------------------------------------------------------------

    def extract_output(self, with_timestamps: bool = False) -> list[Any]:
        """Main-output records emitted since the last call, in order (``(record, timestamp)`` pairs if asked)."""
        records, timestamps = self._operator().outputs.drain()
        return list(zip(records, timestamps)) if with_timestamps else records

    def side_output(self, output_tag: OutputTag, with_timestamps: bool = False) -> list[Any]:
        """Records sent to ``output_tag`` since the last call."""
        pairs = self._operator().outputs.drain_side(output_tag.tag_id)
        return pairs if with_timestamps else [value for value, _ in pairs]

    def num_event_time_timers(self) -> int:
        return self._operator().internal_timer_service.num_event_time_timers()

    def num_processing_time_timers(self) -> int:
        return self._operator().internal_timer_service.num_processing_time_timers()

    def current_watermark(self) -> int:
        return self._operator().internal_timer_service.current_watermark()

    def current_processing_time(self) -> int:
        return self._clock()

    def key_group_of_key(self, key: Any) -> int:
        """The key group ``key`` is in: the one keyed_process gives it on Spark (see docs/key-groups.md)."""
        return self.backend.key_group_of_key(key)

    def state(self, key: Any, descriptor: StateDescriptor) -> Any:
        """The state primitive of ``descriptor`` scoped to ``key``, for assertions: ``harness.state("a", d).value()``.

        The key stays current until the next element or timer.
        """
        primitive = self.backend.get_or_create_state(descriptor)
        self.backend.set_current_key(key)
        return primitive

    # ---- snapshots -------------------------------------------------------------------------------------------------

    def snapshot(self) -> HarnessSnapshot:
        """Snapshot state and timers (a checkpoint), as Flink does between two records.

        Every key group with state or timers is saved as the committed row a Spark micro-batch writes for it (see
        :mod:`keyedstate.testing.snapshots`)."""
        operator = self._operator()
        self._checkpoint_id += 1
        rows = self._persistence().snapshot(self._checkpoint_id, operator.internal_timer_service)
        return HarnessSnapshot(
            checkpoint_id=self._checkpoint_id,
            storage_uri=self._checkpoint_dir,
            rows=rows,
            processing_time=self._clock(),
            num_key_groups=self.backend.num_key_groups,
            backend_kind=self.backend.backend_kind,
            key_types=self.key_types,
        )

    @staticmethod
    def _restored(
        make: Callable[..., "KeyedHarnessBase"],
        snapshot: Union[HarnessSnapshot, Sequence[HarnessSnapshot]],
        **options: Any,
    ) -> Any:
        """``make(**options, ...)`` restored from ``snapshot`` (one or several partitions' snapshots) and opened."""
        snapshots = [snapshot] if isinstance(snapshot, HarnessSnapshot) else list(snapshot)
        if not snapshots:
            raise ConfigurationError("restore needs at least one snapshot")
        for setting in ("num_key_groups", "key_types"):
            if len({getattr(s, setting) for s in snapshots}) > 1:
                raise ConfigurationError(
                    f"the snapshots were taken with different {setting} "
                    f"({sorted({getattr(s, setting) for s in snapshots}, key=repr)}); restore snapshots of one job only"
                )
        harness = make(
            **options, num_key_groups=snapshots[0].num_key_groups, key_types=snapshots[0].key_types,
            checkpoint_dir=snapshots[0].storage_uri,
            initial_processing_time=max(s.processing_time for s in snapshots),
        )
        harness._checkpoint_id = max(s.checkpoint_id for s in snapshots)
        owned = harness.backend.key_group_range
        rows: dict[int, tuple] = {}
        # Each owned key group from one snapshot: the newest that holds it when snapshots overlap.
        for taken in sorted(snapshots, key=lambda s: s.checkpoint_id):
            rows.update((key_group, row) for key_group, row in taken.rows.items() if key_group in owned)
        try:
            harness._persistence().restore(rows, harness._created_operator().internal_timer_service)
        except BaseException:
            harness.close()
            raise
        # As in Flink, the watermark is not part of a snapshot (it is Long.MIN_VALUE until the next watermark
        # arrives); processing time resumes where the snapshot was taken, so overdue processing-time timers fire
        # right after the restore.
        harness.open()
        return harness

    def close(self) -> None:
        """Call the function's ``close`` and release the backend and temporary directories."""
        try:
            if self.operator is not None and self._opened:
                self.operator.close()
        finally:
            self.backend.close()
            if self._store is not None:
                self._store.close()
            for path in self._temp_dirs:
                if path == self._checkpoint_dir and self._keeps_checkpoints():
                    _KEPT_TEMPORARY_CHECKPOINTS.append(path)
                else:
                    shutil.rmtree(path, ignore_errors=True)
            self._temp_dirs.clear()

    def _keeps_checkpoints(self) -> bool:
        # Snapshots taken here may still be restored by another harness after this one closes.
        return self._checkpoint_id > 0

    def __enter__(self) -> Any:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class KeyedProcessHarness(KeyedHarnessBase):
    """Feeds elements, watermarks and processing time to one ``KeyedProcessFunction`` and records its output.

    ``backend`` is ``"heap"``, ``"rocksdb"`` (a temporary RocksDB directory) or a backend instance. A key is in the
    key group keyed_process gives it on Spark, ``pmod(xxhash64(key columns), num_key_groups)``: ``key_types`` are
    the Spark types of the key's columns (``["string", "int"]``, a pyspark schema), or None to infer them from each
    key (a Python ``int`` is a bigint; see docs/key-groups.md). ``max_parallelism`` is a deprecated alias of
    ``num_key_groups`` (PyFlink's name). Partition ``partition`` of ``partitions`` owns a contiguous range of key
    groups (Flink's formula), which is what restoring snapshots into other partitionings rescales. Processing time
    starts at ``initial_processing_time`` and only moves when :meth:`set_processing_time` is called; it is also the
    clock of state TTL (as a Spark micro-batch's timestamp is). The watermark starts at ``MIN_WATERMARK``.
    """

    def __init__(
        self,
        function: KeyedProcessFunction,
        key_selector: Any,
        *,
        backend: BackendChoice = HEAP,
        num_key_groups: Optional[int] = None,
        key_types: Optional[Sequence[KeyTypeSpec]] = None,
        partition: int = 0,
        partitions: int = 1,
        checkpoint_dir: Optional[str] = None,
        initial_processing_time: int = 0,
        max_parallelism: Optional[int] = None,
    ) -> None:
        require_function(function, KeyedProcessFunction, "KeyedProcessHarness", "KeyedCoProcessHarness")
        self._select_key = key_selector_function(key_selector)
        super().__init__(
            function, backend=backend, num_key_groups=num_key_groups, key_types=key_types, partition=partition,
            partitions=partitions, checkpoint_dir=checkpoint_dir, initial_processing_time=initial_processing_time,
            max_parallelism=max_parallelism,
        )

    def process_element(self, value: Any, timestamp: Optional[int] = None) -> None:
        """Process one element; ``timestamp`` is its event time (``ctx.timestamp()``)."""
        self._process(self._select_key(value), value, timestamp, 0)

    def process_elements(self, values: Sequence[Any], timestamps: Optional[Sequence[Optional[int]]] = None) -> None:
        for index, value in enumerate(values):
            self.process_element(value, None if timestamps is None else timestamps[index])

    def process_watermark(self, watermark: int) -> int:
        """Advance the watermark; fires due event-time timers. Returns how many timers fired."""
        return self._advance_watermark(to_time_bound(watermark, "watermark"))

    def end_input(self) -> int:
        """End of a bounded input: the watermark jumps to the maximum and every event-time timer fires."""
        return self.process_watermark(MAX_WATERMARK)

    @classmethod
    def restore(
        cls,
        function: KeyedProcessFunction,
        key_selector: Any,
        snapshot: Union[HarnessSnapshot, Sequence[HarnessSnapshot]],
        *,
        backend: BackendChoice = HEAP,
        partition: int = 0,
        partitions: int = 1,
    ) -> "KeyedProcessHarness":
        """A new, opened harness for partition ``partition`` of ``partitions`` restored from one snapshot or the
        snapshots of several partitions (rescaling: it keeps exactly the key groups it owns)."""
        return cls._restored(
            lambda **options: cls(function, key_selector, **options), snapshot, backend=backend, partition=partition,
            partitions=partitions,
        )
