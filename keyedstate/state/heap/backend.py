"""The heap backend: all state in Python dicts, saved as records in the shared stored-key layout."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import DEFAULT_NUM_KEY_GROUPS, KeyGroupRange, key_group_of_stored_key
from keyedstate.serialization import decode_key
from keyedstate.state.base.backend import KeyedStateBackend, RegisteredState, StateMetadata, TtlClock, system_clock_ms
from keyedstate.state.base.kinds import HEAP
from keyedstate.state.base.layout import (
    KEY_GROUP_PREFIX_BYTES,
    LIST_SEQUENCE_BYTES,
    EntryCodec,
    pack_sequence,
)
from keyedstate.state.base.stores import RawColumn
from keyedstate.state.descriptors import StateDescriptor, StateKind
from keyedstate.state.heap.stores import (
    HeapListStore,
    HeapMapStore,
    HeapRawColumn,
    HeapValueStore,
    write_validator,
)

__all__ = ["HeapKeyedStateBackend"]


def _split_prefix(stored_key: bytes) -> int:
    """Offset just past ``key group + encoded key + namespace`` in a stored key."""
    return decode_key(stored_key, _key_prefix_end(stored_key))[1]


def _key_prefix_end(stored_key: bytes) -> int:
    _, offset = decode_key(stored_key, KEY_GROUP_PREFIX_BYTES)
    return offset


class HeapKeyedStateBackend(KeyedStateBackend):
    """Keeps every entry as a Python object; fastest for state that fits in memory.

    With ``validate_writes`` (the default) every non-scalar value is serialized once when written, so a value that
    could never be saved is rejected at once with an error naming the state, instead of failing every later save.
    """

    backend_kind = HEAP

    def __init__(
        self,
        *,
        num_key_groups: int = DEFAULT_NUM_KEY_GROUPS,
        key_group_range: Optional[KeyGroupRange] = None,
        ttl_clock: TtlClock = system_clock_ms,
        validate_writes: bool = True,
    ) -> None:
        super().__init__(num_key_groups=num_key_groups, key_group_range=key_group_range, ttl_clock=ttl_clock)
        self.validate_writes = validate_writes
        # Restored records of states not registered (yet): kept as bytes and carried into later snapshots.
        self._pending_records: dict[str, list[tuple[bytes, bytes]]] = {}

    def _create_value_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> HeapValueStore:
        return HeapValueStore(self, write_validator(codec, self.validate_writes))

    def _create_list_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> HeapListStore:
        return HeapListStore(self, write_validator(codec, self.validate_writes))

    def _create_map_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> HeapMapStore:
        return HeapMapStore(self, codec, write_validator(codec, self.validate_writes))

    def _create_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> Any:
        store = super()._create_store(descriptor, codec)
        pending = self._pending_records.pop(descriptor.name, None)
        stored = self._restored_metadata.get(descriptor.name)
        if pending and stored is not None and not self.is_stale(stored):
            self._load_into(store, descriptor, codec, self._migrated(stored, descriptor, pending))
        return store

    def _migrated(self, stored: StateMetadata, descriptor: StateDescriptor,
                  records: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """Records stored under ``stored`` in ``descriptor``'s layout (the heap migrates a key group at each load
        until a save writes it in the new layout)."""
        migrate = self.migration_for(stored, descriptor)
        if migrate is None:
            return records
        return [(stored_key, migrate(entry)) for stored_key, entry in records]

    def _create_raw_column(self, name: str) -> RawColumn:
        column = HeapRawColumn(name)
        pending = self._pending_records.pop(_raw_column_state_name(name), None)
        if pending:
            column.put_many(pending)
        return column

    def iter_stored_records(self, state_name: str) -> Iterator[tuple[bytes, bytes]]:
        if state_name in self._pending_records:
            return iter(self._pending_records[state_name])
        registered = self.registered_state(state_name)
        return iter(sorted(_records_of(registered.descriptor, registered.codec, registered.store)))

    def iter_raw_column_records(self, name: str) -> Iterator[tuple[bytes, bytes]]:
        if name in self._raw_columns:
            return self._raw_columns[name].items()
        return iter(self._pending_records.get(_raw_column_state_name(name), ()))

    def raw_column_names(self) -> list[str]:
        pending = [n[len(_RAW_PREFIX):] for n in self._pending_records if n.startswith(_RAW_PREFIX)]
        return sorted(set(self._raw_columns) | set(pending))

    def load_stored_records(self, metadata: StateMetadata, records: Iterable[tuple[bytes, bytes]]) -> int:
        """Add restored records of one state, keeping only owned key groups. Returns how many were kept."""
        if self.is_stale(metadata):
            return 0  # written before the state was dropped and registered again: not this state's data
        kept = self._owned_records(records)
        existing = self._restored_metadata.get(metadata.name)
        if existing is not None and existing != metadata:
            raise ConfigurationError(
                f"snapshots disagree about state {metadata.name!r}: {existing} vs {metadata}; they come from "
                f"different jobs"
            )
        self._restored_metadata[metadata.name] = metadata
        registered = self._states.get(metadata.name)
        if registered is not None:
            kept = self._migrated(metadata, registered.descriptor, kept)
            self._load_into(registered.store, registered.descriptor, registered.codec, kept)
        else:
            self._pending_records.setdefault(metadata.name, []).extend(kept)
        return len(kept)

    def _owned_records(self, records: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        owned = self.key_group_range
        if owned.start == 0 and owned.end == self.num_key_groups - 1:
            # Owning every key group (the Spark group function's backend) keeps everything: skip the per-record
            # decode of the key group; a record outside 0..num_key_groups-1 cannot be written by keyedstate.
            return list(records)
        return [(k, v) for k, v in records if owned.start <= key_group_of_stored_key(k) <= owned.end]

    def _load_into(self, store: Any, descriptor: StateDescriptor, codec: EntryCodec,
                   records: Iterable[tuple[bytes, bytes]]) -> None:
        kind = descriptor.kind
        if kind is StateKind.LIST:
            for stored_key, data in sorted(records):
                composite = stored_key[:-LIST_SEQUENCE_BYTES]
                store.entries.setdefault(composite, []).append(codec.deserialize_entry(data))
        elif kind is StateKind.MAP:
            for stored_key, data in records:
                split = _split_prefix(stored_key)
                user_key, _ = decode_key(stored_key, split)
                inner = store.entries.setdefault(stored_key[:split], {})
                inner[stored_key[split:]] = (user_key, codec.deserialize_entry(data))
        else:
            deserialize = codec.deserialize_entry
            store.entries.update([(stored_key, deserialize(data)) for stored_key, data in records])

    def export_records(self) -> list[tuple[StateMetadata, list[tuple[bytes, bytes]]]]:
        """Every state that holds data (registered, or restored and not registered again), unsorted; the Spark
        state row is built from this."""
        exported = []
        for registered in self._states.values():
            if registered.store.entries:
                records = list(_records_of(registered.descriptor, registered.codec, registered.store))
                exported.append((self.metadata_of(registered.descriptor), records))
        for name, records in self._pending_records.items():
            if records and not name.startswith(_RAW_PREFIX):
                exported.append((self._restored_metadata[name], list(records)))
        return exported

    def drop_unregistered_states(self) -> list[str]:
        dropped = sorted(name for name in self._pending_records
                         if not name.startswith(_RAW_PREFIX) and name not in self._states)
        for name in dropped:
            del self._pending_records[name]
            self._restored_metadata.pop(name, None)
        return dropped

    def reset(self) -> None:
        """Drop all data (registrations stay): lets one backend serve many Spark groups one after another."""
        for registered in self._states.values():
            registered.store.entries.clear()
        for column in self._raw_columns.values():
            column.clear()
        self._pending_records.clear()
        self._restored_metadata.clear()
        self.clear_current_key()

    def iter_keys(self, state_name: str) -> Iterator[Any]:
        store = self.registered_state(state_name).store
        seen: set[bytes] = set()
        for stored_key in list(store.entries):
            prefix = stored_key[: _key_prefix_end(stored_key)]
            if prefix not in seen:
                seen.add(prefix)
                yield decode_key(prefix, KEY_GROUP_PREFIX_BYTES)[0]

    def _remove_expired_of(self, registered: RegisteredState, expired_before_or_at: int) -> int:
        return _remove_expired(registered.descriptor.kind, registered.store.entries, expired_before_or_at)

    def count_keys_with_state(self) -> int:
        """How many (key, namespace) pairs hold an entry in at least one registered state."""
        states = list(self._states.values())
        if len(states) == 1:  # its entries are the pairs: no set to build (metrics ask for this every call)
            return len(states[0].store.entries)
        stored: set[bytes] = set()
        for registered in states:
            stored.update(registered.store.entries)
        return len(stored)


_RAW_PREFIX = "\x01raw:"


def _raw_column_state_name(name: str) -> str:
    return _RAW_PREFIX + name


def _records_of(descriptor: StateDescriptor, codec: EntryCodec, store: Any) -> Iterator[tuple[bytes, bytes]]:
    serialize = codec.serialize_entry
    kind = descriptor.kind
    if kind is StateKind.LIST:
        for composite, entries in store.entries.items():
            for index, entry in enumerate(entries):
                yield composite + pack_sequence(index), serialize(entry)
    elif kind is StateKind.MAP:
        for composite, inner in store.entries.items():
            for encoded_user_key, (_, entry) in inner.items():
                yield composite + encoded_user_key, serialize(entry)
    elif not codec.has_ttl:
        # One value per stored key and no TTL wrapper: serialize with the type's own function in one comprehension
        # (the snapshot's hot path), and redo it entry by entry only to report a failure with the state's name.
        fast = codec.raw_serialize
        try:
            records = [(composite, fast(entry)) for composite, entry in store.entries.items()]
        except Exception:
            records = [(composite, serialize(entry)) for composite, entry in store.entries.items()]
        yield from records
    else:
        for composite, entry in store.entries.items():
            yield composite, serialize(entry)


def _remove_expired(kind: StateKind, data: dict[bytes, Any], expired_before_or_at: int) -> int:
    """Remove entries with ``last_access <= now - ttl`` (i.e. ``last_access + ttl <= now``)."""
    removed = 0
    if kind is StateKind.LIST:
        for composite in list(data):
            entries = data[composite]
            alive = [e for e in entries if e[1] > expired_before_or_at]
            removed += len(entries) - len(alive)
            if alive:
                data[composite] = alive
            else:
                del data[composite]
    elif kind is StateKind.MAP:
        for composite in list(data):
            inner = data[composite]
            for encoded in [k for k, (_, e) in inner.items() if e[1] <= expired_before_or_at]:
                del inner[encoded]
                removed += 1
            if not inner:
                del data[composite]
    else:
        for composite in [k for k, e in data.items() if e[1] <= expired_before_or_at]:
            del data[composite]
            removed += 1
    return removed
