"""One key group of a RocksDB backend that holds many (the harness's): its share of the recorded changes, a RocksDB
checkpoint of it alone, and loading a stored version of it.

Spark's RocksDB mode keeps one database per key group, so a key group's changes, checkpoint and restore are the
database's own. A backend owning a key-group range holds them all in one database; these functions cut one key
group out of it, so the key group is stored in exactly the form Spark stores it (a base holding only that key
group, changelogs touching only it) and either side restores what the other wrote.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from typing import Any, Iterable, Optional

from keyedstate.keygroups import KeyGroupRange, key_group_of_stored_key, key_group_prefix
from keyedstate.state.rocksdb.backend import METADATA_PREFIX
from keyedstate.state.rocksdb.changelog import DELETE_RANGE, PUT, ChangeLog, Operation
from keyedstate.state.rocksdb.db import DEFAULT_CF, RAW_CF_PREFIX, STATE_CF_PREFIX, RocksDatabase, open_read_only
from keyedstate.state.rocksdb.errors import translate

__all__ = ["split_changes", "metadata_ops", "key_group_contents", "key_group_is_empty", "checkpoint_key_group",
           "load_key_group"]

_KEYED_PREFIXES = (STATE_CF_PREFIX, RAW_CF_PREFIX)


def _bounds(key_group: int) -> tuple[bytes, bytes]:
    return key_group_prefix(key_group), key_group_prefix(key_group + 1)


def split_changes(changes: ChangeLog, owned: KeyGroupRange) -> dict[int, list[Operation]]:
    """The operations of ``changes`` on keyed column families (states, raw columns), by key group; a range delete
    spanning key groups is cut into one per key group. Operations on the default family (state metadata) belong to
    no key group and are left out (see :func:`metadata_ops`)."""
    by_group: dict[int, list[Operation]] = {}
    for op in changes.ops:
        kind, family, key, value = op
        if not family.startswith(_KEYED_PREFIXES):
            continue
        if kind != DELETE_RANGE:
            by_group.setdefault(key_group_of_stored_key(key), []).append(op)
            continue
        end = value or b""
        if len(key) >= 2 and len(end) >= 2 and key[:2] == end[:2]:
            by_group.setdefault(key_group_of_stored_key(key), []).append(op)  # within one key group (a key's entries)
            continue
        for key_group in owned:
            start, stop = _bounds(key_group)
            if start < end and key < stop:
                by_group.setdefault(key_group, []).append((kind, family, max(key, start), min(end, stop)))
    return by_group


def _metadata_items(database: RocksDatabase) -> list[tuple[bytes, bytes]]:
    items = []
    for key, value in database.db.items(from_key=METADATA_PREFIX):
        if not key.startswith(METADATA_PREFIX):
            break
        items.append((key, value))
    return items


def metadata_ops(backend: Any) -> list[Operation]:
    """Puts of every state's metadata: each key group's changelog starts with them, so a key group restored alone
    knows its states (Spark's per-key-group databases each hold the metadata too)."""
    backend.write_pending_values()
    return [(PUT, DEFAULT_CF, key, value) for key, value in _metadata_items(backend._database)]


def _keyed_families(database: RocksDatabase) -> list[str]:
    return [name for name in database.column_families if name.startswith(_KEYED_PREFIXES)]


def key_group_contents(backend: Any, key_group: int) -> list[Operation]:
    """Everything the key group holds, as puts (a key group whose stored version cannot be continued)."""
    backend.write_pending_values()
    database = backend._database
    start, stop = _bounds(key_group)
    ops: list[Operation] = []
    for name in _keyed_families(database):
        for key, value in database.column_families[name].items(from_key=start):
            if key >= stop:
                break
            ops.append((PUT, name, key, value))
    return ops


def key_group_is_empty(backend: Any, key_group: int) -> bool:
    backend.write_pending_values()
    database = backend._database
    start, stop = _bounds(key_group)
    for name in _keyed_families(database):
        for key in database.column_families[name].keys(from_key=start):
            if key < stop:
                return False
            break
    return True


def checkpoint_key_group(backend: Any, key_group: int, target: str) -> None:
    """A RocksDB checkpoint in ``target`` of a new database holding only ``key_group`` and the state metadata, in
    the column families Spark's per-key-group database would have. Expired TTL entries are removed first."""
    backend.run_pre_snapshot_hooks()
    backend.cleanup_expired_state()
    work = f"{target}.work"
    shutil.rmtree(work, ignore_errors=True)
    database = RocksDatabase(work, replace(backend.options, reuse_existing=False), collect_on_close=True)
    try:
        ops = metadata_ops(backend) + key_group_contents(backend, key_group)
        for name in _keyed_families(backend._database):
            database.column_family(name)  # empty families too: the states are known to the restored database
        ChangeLog(ops).apply(database)
        database.checkpoint(target)
    finally:
        database.close()
        shutil.rmtree(work, ignore_errors=True)


def load_key_group(backend: Any, key_group: int, base_directory: Optional[str],
                   changelogs: Iterable[ChangeLog]) -> None:
    """Write a stored version of ``key_group`` into the backend: the base's records (a downloaded, verified RocksDB
    checkpoint in ``base_directory``), then every changelog in order. Writes are not recorded as changes."""
    backend.write_pending_values(forget=True)
    database = backend._database
    if base_directory is not None:
        _copy_base(database, base_directory)
    owned = KeyGroupRange(key_group, key_group)
    for changelog in changelogs:
        kept = [op for ops in split_changes(changelog, owned).values() for op in ops]
        kept += [op for op in changelog.ops if op[1] == DEFAULT_CF]
        ChangeLog(kept).apply(database)
    backend.load_metadata_from_database()


def _copy_base(database: RocksDatabase, directory: str) -> None:
    source = open_read_only(directory)
    try:
        names = [name for name in source.list_cf(directory) if name != DEFAULT_CF]
        ops: list[Operation] = [(PUT, DEFAULT_CF, key, value) for key, value in source.items()]
        for name in names:
            database.column_family(name)
            family = source.get_column_family(name)
            ops += [(PUT, name, key, value) for key, value in family.items()]
            del family
        ChangeLog(ops).apply(database)
    except Exception as error:
        raise translate(error, "copy a stored base snapshot", directory) from error
    finally:
        source.close()
