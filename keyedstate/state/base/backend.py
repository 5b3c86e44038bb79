"""The keyed state backend interface and the logic every backend shares.

A backend holds the state of the key groups in ``key_group_range``. The operator sets the current key before it
calls user code; every state primitive then reads and writes the current key's state. Backends differ only in how
they store entries (:mod:`keyedstate.state.base.stores`); a key group's state is saved and restored through
:mod:`keyedstate.state.key_groups` (the committed row of Spark's state modes and of harness snapshots).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

from keyedstate.errors import (
    ConfigurationError,
    KeyGroupNotOwnedError,
    NullKeyError,
    StateDescriptorConflictError,
    UnknownStateError,
)
from keyedstate.keygroups import DEFAULT_NUM_KEY_GROUPS, KeyGroupRange, key_group_assigner, validate_num_key_groups
from keyedstate.serialization import encode_key
from keyedstate.state.base.evolution import EntryMigration, check_evolution, entry_migration
from keyedstate.state.base.key_context import KeyContext
from keyedstate.state.base.layout import EntryCodec, key_group_prefix
from keyedstate.state.base.stores import ListStore, MapStore, RawColumn, ValueStore
from keyedstate.state.descriptors import StateDescriptor, StateKind

__all__ = ["KeyedStateBackend", "RegisteredState", "StateMetadata", "TtlClock", "system_clock_ms"]

logger = logging.getLogger("keyedstate.state.backend")

TtlClock = Callable[[], int]


def system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class StateMetadata:
    """What a snapshot records about a state so a restart can tell whether the new descriptor still fits.

    ``incarnation`` counts how often the state was dropped (removed from the function) and registered again: data
    stored with an older incarnation is stale and never read (0, the first, is not written out)."""

    name: str
    kind: str
    signature: str
    has_ttl: bool
    incarnation: int = 0

    @classmethod
    def of(cls, descriptor: StateDescriptor, incarnation: int = 0) -> "StateMetadata":
        return cls(descriptor.name, descriptor.kind.value, descriptor.type_signature(),
                   descriptor.ttl_config is not None, incarnation)

    def to_json(self) -> dict[str, Any]:
        body = {"name": self.name, "kind": self.kind, "signature": self.signature, "has_ttl": self.has_ttl}
        if self.incarnation:
            body["incarnation"] = self.incarnation
        return body

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "StateMetadata":
        return cls(value["name"], value["kind"], value["signature"], bool(value["has_ttl"]),
                   int(value.get("incarnation", 0)))


@dataclass
class RegisteredState:
    descriptor: StateDescriptor
    codec: EntryCodec
    store: Any
    primitive: Any


class KeyedStateBackend(KeyContext, ABC):
    """State for the key groups in ``key_group_range``, scoped to the current key (a :class:`KeyContext`).

    Not thread-safe: one operator drives one backend, as in Flink (processing, timers and saving key groups never
    run concurrently).
    """

    backend_kind: str = "abstract"

    def __init__(
        self,
        *,
        num_key_groups: int = DEFAULT_NUM_KEY_GROUPS,
        key_group_range: Optional[KeyGroupRange] = None,
        ttl_clock: TtlClock = system_clock_ms,
    ) -> None:
        self.num_key_groups = validate_num_key_groups(num_key_groups)
        self.key_group_range = key_group_range or KeyGroupRange.of_all(num_key_groups)
        if self.key_group_range.start < 0 or self.key_group_range.end >= num_key_groups:
            raise ConfigurationError(
                f"key group range {self.key_group_range} is outside 0..{num_key_groups - 1}"
            )
        self.key_group_of_key: Callable[[Any], int] = key_group_assigner(num_key_groups)
        """``key -> key group`` for :meth:`set_current_key`: Spark's, with the key column types inferred from each
        key; the harness replaces it with one of declared types (:func:`keyedstate.keygroups.key_group_assigner`)."""
        self.ttl_clock = ttl_clock
        KeyContext.__init__(self)
        self._states: dict[str, RegisteredState] = {}
        self._restored_metadata: dict[str, StateMetadata] = {}
        self.state_incarnations: dict[str, int] = {}
        """State name -> its current incarnation (see :class:`StateMetadata`), from the Spark restart record."""
        self._raw_columns: dict[str, RawColumn] = {}
        self._pre_snapshot_hooks: list[Callable[[], None]] = []
        self._closed = False

    def set_current_key(self, key: Any) -> None:
        """Make ``key`` the key all state access refers to until the next call."""
        if key is None:
            raise NullKeyError(
                "the key is None: keyed state needs a non-null key. Filter out or replace null keys before keying "
                "the stream"
            )
        self.set_current_key_in_group(key, encode_key(key), self.key_group_of_key(key))

    def set_current_key_in_group(self, key: Any, encoded_key: bytes, key_group: int) -> None:
        """Set the current key when its key group was assigned outside keyedstate (Spark's hash of the key)."""
        if not (self.key_group_range.start <= key_group <= self.key_group_range.end):
            raise KeyGroupNotOwnedError(
                f"key {key!r} belongs to key group {key_group}, which this backend (key groups "
                f"{self.key_group_range.start}..{self.key_group_range.end}) does not own"
            )
        self.key = key
        self.key_group = key_group
        self.key_prefix = key_group_prefix(key_group) + encoded_key

    def composite(self, namespace: bytes) -> bytes:
        """The stored key prefix of the current key in ``namespace`` (hot path of every store)."""
        try:
            return self.key_prefix + namespace  # type: ignore[operator]
        except TypeError:
            self.get_current_key()
            raise

    def get_or_create_state(self, descriptor: StateDescriptor) -> Any:
        """The state primitive for ``descriptor``; the same object for every call with an equal descriptor."""
        if not isinstance(descriptor, StateDescriptor):
            raise ConfigurationError(
                f"expected a state descriptor (ValueStateDescriptor, ...), got {type(descriptor).__qualname__}"
            )
        registered = self._states.get(descriptor.name)
        if registered is not None:
            existing = registered.descriptor
            if (
                existing.kind is not descriptor.kind
                or existing.type_signature() != descriptor.type_signature()
                or (existing.ttl_config != descriptor.ttl_config)
            ):
                raise StateDescriptorConflictError(
                    f"state {descriptor.name!r} is already registered as {existing!r}"
                    f"{' with TTL ' + existing.ttl_config.describe() if existing.ttl_config else ''}; it cannot be "
                    f"registered again as {descriptor!r}"
                    f"{' with TTL ' + descriptor.ttl_config.describe() if descriptor.ttl_config else ''}. "
                    f"Use one descriptor per state name"
                )
            return registered.primitive
        restored = self._restored_metadata.get(descriptor.name)
        if restored is not None and not self.is_stale(restored):
            check_evolution(restored, descriptor)
        codec = EntryCodec(descriptor)
        store = self._create_store(descriptor, codec)
        primitive = self._create_primitive(descriptor, codec, store)
        self._states[descriptor.name] = RegisteredState(descriptor, codec, store, primitive)
        return primitive

    def registered_state(self, name: str) -> RegisteredState:
        try:
            return self._states[name]
        except KeyError:
            known = ", ".join(sorted(self._states)) or "none"
            raise UnknownStateError(
                f"no state named {name!r} is registered (registered: {known}); register it with "
                f"runtime_context.get_state(...) in open()"
            ) from None

    def registered_state_names(self) -> list[str]:
        return list(self._states)

    def state_metadata(self) -> list[StateMetadata]:
        """Metadata of every registered state plus restored states not registered again (they are kept)."""
        metadata = {name: self.metadata_of(s.descriptor) for name, s in self._states.items()}
        for name, restored in self._restored_metadata.items():
            metadata.setdefault(name, restored)
        return list(metadata.values())

    def metadata_of(self, descriptor: StateDescriptor) -> StateMetadata:
        """What entries written now through ``descriptor`` are stored as."""
        return StateMetadata.of(descriptor, self.state_incarnations.get(descriptor.name, 0))

    def is_stale(self, stored: StateMetadata) -> bool:
        """Whether ``stored`` describes data of an earlier incarnation of a state that was dropped since."""
        return stored.incarnation < self.state_incarnations.get(stored.name, 0)

    def migration_for(self, stored: StateMetadata, descriptor: StateDescriptor) -> Optional[EntryMigration]:
        """How entries stored under ``stored`` become entries of ``descriptor`` (None: read as they are); raises
        when they cannot be read."""
        if stored == self.metadata_of(descriptor):
            return None
        return entry_migration(stored, descriptor, self.ttl_clock)

    def drop_unregistered_states(self) -> list[str]:
        """Delete the data of restored states the function does not register (removed from it); returns their
        names. Called once every state is registered: before a harness snapshot, after a Spark key group loads."""
        return []

    def settle_restored_states(self) -> None:
        """After a key group was loaded into a backend whose states are all registered: migrate entries stored in an
        older layout that are not migrated yet, and drop the states no longer registered."""
        self.drop_unregistered_states()

    def _create_primitive(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any) -> Any:
        """The user-facing state object over ``store``; backends may return a specialised subclass."""
        from keyedstate.state.primitives import create_primitive  # primitives import this module

        return create_primitive(descriptor, codec, store, self)

    def _create_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> Any:
        kind = descriptor.kind
        if kind is StateKind.LIST:
            return self._create_list_store(descriptor, codec)
        if kind is StateKind.MAP:
            return self._create_map_store(descriptor, codec)
        return self._create_value_store(descriptor, codec)

    @abstractmethod
    def _create_value_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> ValueStore: ...

    @abstractmethod
    def _create_list_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> ListStore: ...

    @abstractmethod
    def _create_map_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> MapStore: ...

    def raw_column(self, name: str) -> RawColumn:
        """An internal ordered bytes map that is snapshotted and rescaled with the keyed state."""
        column = self._raw_columns.get(name)
        if column is None:
            column = self._create_raw_column(name)
            self._raw_columns[name] = column
        return column

    @abstractmethod
    def _create_raw_column(self, name: str) -> RawColumn: ...

    def add_pre_snapshot_hook(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` at the start of every snapshot (lets in-memory services flush into their raw column)."""
        self._pre_snapshot_hooks.append(hook)

    def run_pre_snapshot_hooks(self) -> None:
        """Run the hooks added with :meth:`add_pre_snapshot_hook`; every snapshot starts with this."""
        for hook in self._pre_snapshot_hooks:
            hook()

    @abstractmethod
    def iter_keys(self, state_name: str) -> Iterator[Any]:
        """Every key that has an entry in ``state_name`` (each once, any namespace)."""

    @abstractmethod
    def iter_stored_records(self, state_name: str) -> Iterator[tuple[bytes, bytes]]:
        """Every (stored key, serialized entry) of a state in the shared layout, ascending by stored key."""

    # Row mode (format 1) moves records in the shared layout; RocksDB mode (format 2) stores recorded changes and
    # RocksDB checkpoints, which only the RocksDB backends have (keyedstate.state.rocksdb.recording).

    @abstractmethod
    def export_records(self) -> list[tuple["StateMetadata", list[tuple[bytes, bytes]]]]:
        """Every state that holds data (registered, or restored and not registered again) with its records in the
        shared layout; raw columns are not included (their owners export them)."""

    @abstractmethod
    def load_stored_records(self, metadata: "StateMetadata", records: Iterable[tuple[bytes, bytes]]) -> int:
        """Add records of one state in the shared layout, keeping only owned key groups; returns how many were kept.
        The state may be registered later; its metadata is checked against the descriptor then (or now)."""

    @abstractmethod
    def reset(self) -> None:
        """Drop every state's and raw column's data and the restored metadata (registrations stay), so one backend
        can serve one Spark key group after another."""

    @abstractmethod
    def count_keys_with_state(self) -> int:
        """How many (key, namespace) pairs hold an entry in at least one state."""

    @abstractmethod
    def raw_column_names(self) -> list[str]:
        """Names of every raw column that exists (created, or restored)."""

    def prepare_snapshot(self) -> None:
        """Before a snapshot is saved: drop the states no longer registered, run the pre-snapshot hooks (timer
        services flush into their raw columns) and drop expired entries of TTL states that ask for cleanup in
        background or at full snapshots."""
        self.drop_unregistered_states()
        self.run_pre_snapshot_hooks()
        self.remove_expired_entries(only_snapshot_cleanup=True)

    def cleanup_expired_state(self) -> int:
        """Delete every expired entry of states with TTL; return how many were deleted."""
        return self.remove_expired_entries(only_snapshot_cleanup=False)

    def remove_expired_entries(self, only_snapshot_cleanup: bool) -> int:
        """Delete entries with ``last_access + ttl <= now`` of TTL states (with ``only_snapshot_cleanup``, only of
        those asking for cleanup in background or at full snapshots); returns how many were deleted."""
        now = self.ttl_clock()
        removed = 0
        for registered in self._states.values():
            ttl = registered.descriptor.ttl_config
            if ttl is not None and (ttl.cleanup_in_background or ttl.cleanup_full_snapshot
                                    or not only_snapshot_cleanup):
                removed += self._remove_expired_of(registered, now - ttl.ttl_millis)
        if removed:
            logger.debug("TTL cleanup removed %d expired entries from the %s backend", removed, self.backend_kind)
        return removed

    @abstractmethod
    def _remove_expired_of(self, registered: RegisteredState, expired_before_or_at: int) -> int: ...

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> "KeyedStateBackend":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
