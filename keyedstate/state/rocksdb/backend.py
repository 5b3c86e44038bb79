"""The RocksDB keyed state backend: state larger than memory; with recorded writes, incremental saves."""

from __future__ import annotations

import json
import os
from itertools import takewhile
from typing import Any, Iterable, Iterator, Optional, Sequence

from keyedstate.errors import UnknownStateError
from keyedstate.keygroups import DEFAULT_NUM_KEY_GROUPS, KeyGroupRange, key_group_of_stored_key, key_group_prefix
from keyedstate.serialization import decode_key
from keyedstate.state.base.backend import KeyedStateBackend, RegisteredState, StateMetadata, TtlClock, system_clock_ms
from keyedstate.state.base.kinds import ROCKSDB
from keyedstate.state.base.layout import KEY_GROUP_PREFIX_BYTES, EntryCodec, prefix_successor
from keyedstate.state.base.stores import RawColumn
from keyedstate.state.descriptors import StateDescriptor, StateKind
from keyedstate.state.primitives.value_state import MemoValueState
from keyedstate.state.rocksdb.changelog import PUT, ChangeLog
from keyedstate.state.rocksdb.db import DEFAULT_CF, RAW_CF_PREFIX, STATE_CF_PREFIX, RocksDatabase
from keyedstate.state.rocksdb.list_store import RocksDBListStore
from keyedstate.state.rocksdb.map_store import RocksDBMapStore
from keyedstate.state.rocksdb.options import RocksDBOptions
from keyedstate.state.rocksdb.raw_column import RocksDBRawColumn
from keyedstate.state.rocksdb.value_store import RocksDBValueStore

__all__ = ["RocksDBKeyedStateBackend"]

METADATA_PREFIX = b"state-metadata:"  # in the default column family: the database describes its own states
_CLEANUP_BATCH = 10_000
# Every stored key starts with a 2-byte key group < 0xffff (max parallelism is at most 32768).
_AFTER_EVERY_KEY = b"\xff\xff\xff"


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """Keyed state in a local RocksDB database at ``path`` (one column family per state, WAL off).

    With ``record_changes`` every write is also recorded (:meth:`take_changes`): key groups are then saved as the
    changes since their last save (:mod:`keyedstate.state.key_groups.versioned`).
    """

    backend_kind = ROCKSDB
    record_changes = False
    """Whether the database records every write (:meth:`RocksDatabase.take_changes`); the Spark key-group backend
    stores those as changelogs."""
    collect_on_close = True
    """A full garbage collection after closing (see :class:`RocksDatabase`)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        num_key_groups: int = DEFAULT_NUM_KEY_GROUPS,
        key_group_range: Optional[KeyGroupRange] = None,
        ttl_clock: TtlClock = system_clock_ms,
        options: Optional[RocksDBOptions] = None,
        record_changes: Optional[bool] = None,
    ) -> None:
        super().__init__(num_key_groups=num_key_groups, key_group_range=key_group_range, ttl_clock=ttl_clock)
        if record_changes is not None:
            self.record_changes = record_changes
        self.path = os.path.abspath(os.fspath(path))
        self.options = options or RocksDBOptions()
        self._value_stores: list[RocksDBValueStore] = []
        self._database = RocksDatabase(self.path, self.options, self.record_changes,
                                       collect_on_close=self.collect_on_close)
        self.load_metadata_from_database()

    @property
    def database(self) -> RocksDatabase:
        """The open database, which the stores bind their column families to."""
        return self._database

    def _create_primitive(self, descriptor: StateDescriptor, codec: EntryCodec, store: Any) -> Any:
        if descriptor.kind is StateKind.VALUE and descriptor.ttl_config is None:
            return MemoValueState(descriptor, codec, store, self)
        return super()._create_primitive(descriptor, codec, store)

    def _create_value_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> RocksDBValueStore:
        store = RocksDBValueStore(self, self._state_family(descriptor), codec, descriptor.name)
        self._value_stores.append(store)
        return store

    def write_pending_values(self, forget: bool = False) -> None:
        """Write the entries value states kept back (see :class:`RocksDBValueStore`); called before the column
        families are read or written other than through the stores. ``forget``: the caller writes to the database
        directly next, so what the stores remember may become stale."""
        for store in self._value_stores:
            store.write_pending()
            if forget:
                store.forget_memo()

    def run_pre_snapshot_hooks(self) -> None:
        super().run_pre_snapshot_hooks()
        self.write_pending_values()

    def _create_list_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> RocksDBListStore:
        return RocksDBListStore(self, self._state_family(descriptor), codec, descriptor.name)

    def _create_map_store(self, descriptor: StateDescriptor, codec: EntryCodec) -> RocksDBMapStore:
        return RocksDBMapStore(self, self._state_family(descriptor), codec, descriptor.name)

    def _create_raw_column(self, name: str) -> RawColumn:
        return RocksDBRawColumn(self, RAW_CF_PREFIX + name, name)

    def _state_family(self, descriptor: StateDescriptor) -> str:
        self._evolve_state(descriptor)
        return STATE_CF_PREFIX + descriptor.name

    def _evolve_state(self, descriptor: StateDescriptor) -> None:
        """Bring the state's stored entries to ``descriptor``'s layout, once per database: entries of a dropped
        earlier incarnation are deleted, entries in an older layout rewritten (recorded, so the next save stores
        the migrated entries), and the new metadata written."""
        current = self.metadata_of(descriptor)
        stored_json = self._database.column_families[DEFAULT_CF].get(METADATA_PREFIX + descriptor.name.encode())
        stored = None if stored_json is None else StateMetadata.from_json(json.loads(stored_json))
        if stored == current:
            return
        if stored is not None:
            family = self._database.column_families.get(STATE_CF_PREFIX + descriptor.name)
            if family is not None:
                self.write_pending_values(forget=True)
                if self.is_stale(stored):
                    family.delete_range(b"", _AFTER_EVERY_KEY)
                else:
                    migrate = self.migration_for(stored, descriptor)
                    if migrate is not None:
                        self._put_entries(STATE_CF_PREFIX + descriptor.name, family.items(), migrate)
        self._write_metadata([current])

    def _put_entries(self, family_name: str, entries: Iterable[tuple[bytes, bytes]], migrate: Any = None) -> None:
        """Write ``entries`` into a column family, each value through ``migrate`` when given, in bounded batches."""
        database = self._database
        handle = database.handles[family_name]
        batch = database.new_batch()
        for key, value in entries:
            batch.put(key, value if migrate is None else migrate(value), handle)
            if len(batch) >= _CLEANUP_BATCH:
                database.write(batch)
                batch = database.new_batch()
        if len(batch):
            database.write(batch)

    def settle_restored_states(self) -> None:
        for registered in self._states.values():
            self._evolve_state(registered.descriptor)
        self.drop_unregistered_states()

    def drop_unregistered_states(self) -> list[str]:
        stored = {metadata.name for metadata in self._stored_metadata()} | set(self.stored_state_names())
        dropped = sorted(stored - set(self._states))
        if not dropped:
            return dropped  # every call of RocksDB mode asks: keep the value stores' memos when nothing changes
        self.write_pending_values(forget=True)
        default = self._database.column_families[DEFAULT_CF]
        for name in dropped:
            family = self._database.column_families.get(STATE_CF_PREFIX + name)
            if family is not None:
                family.delete_range(b"", _AFTER_EVERY_KEY)
            if default.get(METADATA_PREFIX + name.encode()) is not None:
                default.delete(METADATA_PREFIX + name.encode())
            self._restored_metadata.pop(name, None)
        return dropped

    def _stored_metadata(self) -> Iterator[StateMetadata]:
        """The metadata of every state the database describes (registered or not)."""
        for _, _, _, value in self.metadata_changes().ops:
            yield StateMetadata.from_json(json.loads(value or b""))

    def metadata_changes(self) -> ChangeLog:
        """Puts of every state's metadata as the database stores it."""
        items = self._database.db.items(from_key=METADATA_PREFIX)
        return ChangeLog([(PUT, DEFAULT_CF, key, value) for key, value in takewhile(
            lambda item: item[0].startswith(METADATA_PREFIX), items)])

    def load_metadata_from_database(self) -> None:
        """Read the metadata of the states the database holds (after a restore or replayed changes)."""
        for metadata in self._stored_metadata():
            if metadata.name not in self._states:
                self._restored_metadata[metadata.name] = metadata

    def _write_metadata(self, metadata: Sequence[StateMetadata]) -> None:
        default = self._database.column_families[DEFAULT_CF]
        keys, values = [], []
        for item in metadata:
            key, value = METADATA_PREFIX + item.name.encode(), json.dumps(item.to_json()).encode()
            if default.get(key) != value:  # unchanged metadata is not written again (nor recorded as a change)
                keys.append(key)
                values.append(value)
        if keys:
            self._database.put_entries(DEFAULT_CF, keys, values)

    def _family_of_state(self, state_name: str) -> Any:
        self.write_pending_values()
        family = self._database.column_families.get(STATE_CF_PREFIX + state_name)
        if family is None:
            if state_name in self._restored_metadata:
                return self._database.column_family(STATE_CF_PREFIX + state_name)
            self.registered_state(state_name)  # raises UnknownStateError naming the registered states
            raise UnknownStateError(f"state {state_name!r} has no column family in {self.path}")
        return family

    def stored_state_names(self) -> list[str]:
        """Names of every state with a column family (registered or restored)."""
        return [name[len(STATE_CF_PREFIX):] for name in self._database.family_names(STATE_CF_PREFIX)]

    def raw_column_names(self) -> list[str]:
        return [name[len(RAW_CF_PREFIX):] for name in self._database.family_names(RAW_CF_PREFIX)]

    def iter_keys(self, state_name: str) -> Iterator[Any]:
        family = self._family_of_state(state_name)
        iterator = family.iter()
        iterator.seek_to_first()
        while iterator.valid():
            stored_key = iterator.key()
            key, end = decode_key(stored_key, KEY_GROUP_PREFIX_BYTES)
            yield key
            iterator.seek(prefix_successor(stored_key[:end]))  # skip the key's other namespaces and entries

    def iter_stored_records(self, state_name: str) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._family_of_state(state_name).items())

    def iter_raw_column_records(self, name: str) -> Iterator[tuple[bytes, bytes]]:
        family = self._database.column_families.get(RAW_CF_PREFIX + name)
        return iter(()) if family is None else iter(family.items())

    def export_records(self) -> list[tuple[StateMetadata, list[tuple[bytes, bytes]]]]:
        metadata = {m.name: m for m in self.state_metadata()}
        exported = []
        for name in self.stored_state_names():
            records = list(self.iter_stored_records(name))
            if records and name in metadata:
                exported.append((metadata[name], records))
        return exported

    def load_stored_records(self, metadata: StateMetadata, records: Iterable[tuple[bytes, bytes]]) -> int:
        if self.is_stale(metadata):
            return 0  # written before the state was dropped and registered again: not this state's data
        registered = self._states.get(metadata.name)
        migrate = None
        if registered is not None:
            migrate = self.migration_for(metadata, registered.descriptor)
        else:
            self._restored_metadata[metadata.name] = metadata
            self._write_metadata([metadata])
        owned = self.key_group_range
        kept = [(k, v) for k, v in records if owned.start <= key_group_of_stored_key(k) <= owned.end]
        self.write_pending_values(forget=True)
        self._database.column_family(STATE_CF_PREFIX + metadata.name)
        self._put_entries(STATE_CF_PREFIX + metadata.name, kept, migrate)
        return len(kept)

    def reset(self) -> None:
        database = self._database
        for name in database.family_names(STATE_CF_PREFIX) + database.family_names(RAW_CF_PREFIX):
            database.column_families[name].delete_range(b"", _AFTER_EVERY_KEY)
        for name in list(self._restored_metadata):
            if name not in self._states:
                database.column_families[DEFAULT_CF].delete(METADATA_PREFIX + name.encode())
        self._restored_metadata.clear()
        for store in self._stores():
            store.bind(database)  # drops what stores cache about the data (list sequences)
        self.clear_current_key()

    def count_keys_with_state(self) -> int:
        prefixes: set[bytes] = set()
        for name in self.stored_state_names():
            for stored_key in self._family_of_state(name).keys():
                _, end = decode_key(stored_key, KEY_GROUP_PREFIX_BYTES)
                _, end = decode_key(stored_key, end)
                prefixes.add(stored_key[:end])
        return len(prefixes)

    def _remove_expired_of(self, registered: RegisteredState, expired_before_or_at: int) -> int:
        return registered.store.remove_expired(expired_before_or_at, _CLEANUP_BATCH)

    def take_changes(self) -> ChangeLog:
        """The writes since the database was opened or the last call (all of its content when not recording)."""
        self.run_pre_snapshot_hooks()  # the timer service issues its deferred deletes first
        return self._database.take_changes() if self._database.records_changes else self.contents()

    def contents(self, key_group: Optional[int] = None) -> ChangeLog:
        """Everything the database holds (states, raw columns, state metadata) as puts; with ``key_group``, the
        entries of that key group only, and the state metadata."""
        self.write_pending_values()
        if key_group is None:
            return self._database.contents_as_changes()
        start, stop = key_group_prefix(key_group), key_group_prefix(key_group + 1)
        ops = self.metadata_changes().ops
        for name, family in self._database.column_families.items():
            if name != DEFAULT_CF:
                ops += [(PUT, name, key, value) for key, value in takewhile(
                    lambda item: item[0] < stop, family.items(from_key=start))]
        return ChangeLog(ops)

    def is_empty(self, key_group: Optional[int] = None) -> bool:
        """Whether no state and no raw column (timers) holds an entry (of ``key_group``)."""
        self.write_pending_values()
        if key_group is None:
            return self._database.is_empty()
        start, stop = key_group_prefix(key_group), key_group_prefix(key_group + 1)
        return all(next(iter(family.keys(from_key=start)), stop) >= stop
                   for name, family in self._database.column_families.items() if name != DEFAULT_CF)

    def checkpoint(self, target: str) -> None:
        """A consistent copy of the database in ``target`` (SST files hard-linked); expired TTL entries are removed
        first, so a base snapshot never carries them."""
        self.run_pre_snapshot_hooks()
        self.cleanup_expired_state()
        self._database.checkpoint(target)

    def live_sst_files(self) -> Optional[dict[str, int]]:
        """The SST files a checkpoint would link, path to size (a new base's files, but for the memtables')."""
        return self._database.live_sst_files()

    def replay(self, changes: ChangeLog) -> None:
        """Write a stored :class:`~keyedstate.state.rocksdb.changelog.ChangeLog` into the database (not recorded
        again: it is stored already)."""
        self.write_pending_values(forget=True)
        changes.apply(self._database)
        self.load_metadata_from_database()  # the changes may describe states the database did not know

    def _stores(self) -> list[Any]:
        return [registered.store for registered in self._states.values()] + list(self._raw_columns.values())

    def _close_database(self) -> None:
        try:
            self.write_pending_values()
        finally:
            for store in self._stores():
                store.unbind(self.path)
            self._database.close()

    def _open_database(self, reuse_existing: bool, new: bool = False) -> None:
        """Open the database at :attr:`path`; ``new``: the caller knows it is empty (a key group's first call)."""
        from dataclasses import replace

        families = [STATE_CF_PREFIX + name for name in self._states]
        if new:
            # raw columns are created by their first write (see RocksDBRawColumn); a new database creates those an
            # earlier database of this backend had as it opens
            families += [column.family_name for column in self._raw_columns.values()
                         if isinstance(column, RocksDBRawColumn) and column.used]
        self._database = RocksDatabase(self.path, replace(self.options, reuse_existing=reuse_existing),
                                       self.record_changes, families, self.collect_on_close, capture_content=new)
        for store in self._stores():
            store.bind(self._database)

    def close(self) -> None:
        if not self._closed and self._database.is_open:
            self._close_database()
        super().close()
