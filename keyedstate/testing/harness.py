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

import logging
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypedDict, Union

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
from keyedstate.testing.temporary import remove_temporary_directory, temporary_directory
from timers import to_epoch_millis, to_time_bound

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from keyedstate.spark.options import KeyedProcessOptions
    from keyedstate.state.rocksdb.options import RocksDBOptions

__all__ = ["KeyedProcessHarness", "HarnessSnapshot", "KeyedHarnessBase", "HarnessSettings", "RestoreSettings",
           "key_selector_function", "require_function"]

logger = logging.getLogger("keyedstate.testing.harness")

BackendChoice = Union[str, KeyedStateBackend]


class RestoreSettings(TypedDict, total=False):
    """The keyword arguments of the harnesses' ``restore``: ``backend``, ``partition``, ``partitions``, ``options``."""

    backend: BackendChoice
    partition: int
    partitions: int
    options: Optional[KeyedProcessOptions]


class HarnessSettings(RestoreSettings, total=False):
    """Those and ``num_key_groups``, ``key_types``, ``checkpoint_dir``, ``initial_processing_time``,
    ``max_parallelism``: the keyword arguments of both harnesses (see :class:`KeyedProcessHarness`)."""

    num_key_groups: Optional[int]
    key_types: Optional[Sequence[KeyTypeSpec]]
    checkpoint_dir: Optional[str]
    initial_processing_time: int
    max_parallelism: Optional[int]

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


def _agreed(setting: str, given: Any, options: Optional[KeyedProcessOptions], field: Optional[str] = None) -> Any:
    """The keyword argument ``setting`` if given, else the options' ``field`` (named ``setting`` too by default);
    both given must be equal, or the test would run with other settings than the job it stands for."""
    field = field or setting
    from_options = getattr(options, field, None)
    if given is not None and from_options is not None and given != from_options:
        raise ConfigurationError(f"{setting}={given!r} disagrees with options.{field}={from_options!r}; the harness "
                                 f"runs with one of them: drop {setting}= or change the options")
    return from_options if given is None else given


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

    def __init__(self, function: Any, **settings: Unpack[HarnessSettings]) -> None:
        for name in set(settings) - set(HarnessSettings.__annotations__):
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {name!r}")
        options = settings.get("options")
        if options is not None:
            from keyedstate.spark.options import KeyedProcessOptions  # loads pyspark, as the caller's import did
            if not isinstance(options, KeyedProcessOptions):
                raise ConfigurationError(f"options must be a keyedstate.spark.KeyedProcessOptions, got "
                                         f"{type(options).__qualname__}")
        self._job_parameters = dict(getattr(options, "job_parameters", None) or {})
        self._snapshot_policy = getattr(options, "snapshot_policy", None)
        backend = settings.get("backend")
        kind = _agreed("backend", getattr(backend, "backend_kind", backend), options, "state_backend") or HEAP
        num_key_groups, alias = settings.get("num_key_groups"), settings.get("max_parallelism")
        if alias is not None:  # the user's call is three frames up: the subclass's __init__, then this one
            num_key_groups = num_key_groups_or_alias(num_key_groups, alias, type(self).__name__, stacklevel=3)
        # the options' number, or the default when neither names one (validated)
        num_key_groups = num_key_groups_or_alias(_agreed("num_key_groups", num_key_groups, options), None, "")
        # Declared types are checked now (a typo fails here, not at the first element); kept as DDL names.
        key_types = settings.get("key_types")
        self.key_types = None if key_types is None else tuple(str(t) for t in key_column_types(key_types))
        self._clock = ManualClock(settings.get("initial_processing_time", 0))
        self._temp_dirs: list[str] = []
        self._checkpoint_dir = settings.get("checkpoint_dir") or self._temp_dir("keyedstate-harness-checkpoints-")
        self.partition, self.partitions = settings.get("partition", 0), settings.get("partitions", 1)
        key_group_range = key_group_range_for_partition(self.partition, self.partitions, num_key_groups)
        self.backend = self._make_backend(backend if isinstance(backend, KeyedStateBackend) else kind, num_key_groups,
                                          key_group_range, getattr(options, "rocksdb_options", None))
        if self.key_types is not None:
            self.backend.key_group_of_key = key_group_assigner(self.backend.num_key_groups, self.key_types)
        self._store: Any = None  # the save/restore step of the backend (created at the first snapshot or restore)
        self._checkpoint_id = 0
        self._function = function
        self.operator: Optional[KeyedProcessOperator] = None
        self._opened = False

    def _temp_dir(self, prefix: str) -> str:
        path = temporary_directory(prefix)
        self._temp_dirs.append(path)
        return path

    def _make_backend(self, choice: BackendChoice, num_key_groups: int, key_group_range: Any,
                      rocksdb_options: Optional[RocksDBOptions]) -> KeyedStateBackend:
        if isinstance(choice, KeyedStateBackend):
            if rocksdb_options is not None:
                raise ConfigurationError("options.rocksdb_options tune the RocksDB backend the harness creates; pass "
                                         "backend='rocksdb' (or build the backend instance with those options)")
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
                key_group_range=key_group_range, ttl_clock=self._clock, options=rocksdb_options, record_changes=True,
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
                number_of_parallel_subtasks=self.partitions, job_parameters=self._job_parameters,
            )
        return self.operator

    def _persistence(self) -> Any:
        if self._store is None:
            self._store = harness_store(self.backend, self._checkpoint_dir, self._snapshot_policy)
        return self._store

    def _operator(self) -> KeyedProcessOperator:
        if self.operator is None or not self._opened:
            raise KeyedStateError("the harness is not open: call harness.open() first")
        return self.operator

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
    def _restored(make: Callable[..., "KeyedHarnessBase"], snapshot: Union[HarnessSnapshot, Sequence[HarnessSnapshot]],
                  **settings: Any) -> Any:
        """``make(**settings, ...)`` restored from ``snapshot`` (one or several partitions' snapshots) and opened."""
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
            **settings, num_key_groups=snapshots[0].num_key_groups, key_types=snapshots[0].key_types,
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
        """Call the function's ``close`` and release the backend and temporary directories (those of snapshots
        taken here stay until the process exits: another harness may restore them)."""
        try:
            if self.operator is not None and self._opened:
                self.operator.close()
        finally:
            self.backend.close()
            if self._store is not None:
                self._store.close()
            for path in self._temp_dirs:
                # snapshots taken here live in this process: another harness may restore them after this one closes,
                # so their directory goes when the process exits
                if path != self._checkpoint_dir or not self._keeps_checkpoints():
                    remove_temporary_directory(path)
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

    Its keyword arguments (:class:`HarnessSettings`) are those of :class:`KeyedCoProcessHarness` too. ``backend`` is
    ``"heap"`` (the default), ``"rocksdb"`` (a temporary RocksDB directory) or a backend instance. A key is in the
    key group keyed_process gives it on Spark, ``pmod(xxhash64(key columns), num_key_groups)``: ``key_types`` are
    the Spark types of the key's columns (``["string", "int"]``, a pyspark schema), or None to infer them from each
    key (a Python ``int`` is a bigint; see docs/key-groups.md). ``max_parallelism`` is a deprecated alias of
    ``num_key_groups`` (PyFlink's name). Partition ``partition`` of ``partitions`` owns a contiguous range of key
    groups (Flink's formula), which is what restoring snapshots into other partitionings rescales. Processing time
    starts at ``initial_processing_time`` and only moves when :meth:`set_processing_time` is called; it is also the
    clock of state TTL (as a Spark micro-batch's timestamp is). The watermark starts at ``MIN_WATERMARK``.

    ``options`` is the :class:`keyedstate.spark.KeyedProcessOptions` the job passes to keyed_process, so a test runs
    with the job's settings: the harness takes its ``num_key_groups`` (None: the harness's default),
    ``state_backend``, ``rocksdb_options``, ``snapshot_policy`` (when a RocksDB snapshot stores a key group's new
    base instead of one more changelog, as on Spark) and ``job_parameters`` (what
    ``runtime_context.get_job_parameter`` reads). A keyword argument given with another value than the options' is
    refused (``dataclasses.replace`` the options instead). The fields that only mean something on Spark
    (``time_mode``, ``key_group_layout``, ``processing_time_poll_interval_ms``, ``drop_late_events``, the metrics,
    ``state_storage`` and its options, ``state_local_dir``, ``uid``, ``initial_state``) are not used by the
    harness.
    """

    def __init__(self, function: KeyedProcessFunction, key_selector: Any, **settings: Unpack[HarnessSettings]) -> None:
        require_function(function, KeyedProcessFunction, "KeyedProcessHarness", "KeyedCoProcessHarness")
        self._select_key = key_selector_function(key_selector)
        super().__init__(function, **settings)

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
    def restore(cls, function: KeyedProcessFunction, key_selector: Any,
                snapshot: Union[HarnessSnapshot, Sequence[HarnessSnapshot]],
                **settings: Unpack[RestoreSettings]) -> "KeyedProcessHarness":
        """A new, opened harness for partition ``partition`` of ``partitions`` restored from one snapshot or the
        snapshots of several partitions (rescaling: it keeps exactly the key groups it owns)."""
        return cls._restored(lambda **given: cls(function, key_selector, **given), snapshot, **settings)
