"""The initial state of a query: what :func:`keyedstate.spark.bootstrap_keyed_state` wrote, found and checked on the
driver, read one key group at a time on the executors.

Layout below the bootstrap's path::

    _bootstrap.json              the bootstrap's commit record, written last: its id, state backend, num_key_groups,
                                 key column types, and every key group's row file with size and sha256
    rows/kg-00007-<tag>.row      key group 7's state row (the fields of a StateRow, msgpack): format 1 (heap) holds
                                 the state and timers; format 2 (rocksdb) a version record naming files in kg-00007/
    kg-00007/...                 RocksDB mode: the key group's version files (keyedstate.state.rocksdb.versions)

A key group's first call in the query (no committed row) loads its bootstrapped row. Every row the query writes
afterwards carries the bootstrap id (format 1: the tag column; format 2: the version record's ``origin``), which
tells a restart of the bootstrapped query (continue) from a checkpoint that already held other state (refused).
The query never writes below the bootstrap's path, so its garbage collection never touches the bootstrap's files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

import msgpack

from keyedstate.checkpoint.filesystems import StorageOptions
from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, SnapshotCorruptedError, SnapshotError
from keyedstate.redaction import redact_uri
from keyedstate.state.key_groups.row_format import StateRow
from keyedstate.state.rocksdb.versions import Where

__all__ = ["KeyedStateBootstrap", "InitialState", "BOOTSTRAP_MANIFEST", "resolve_initial_state", "check_origin",
           "encode_row", "new_bootstrap_storage", "read_bootstrap_manifest", "storage_at", "write_bootstrap_manifest"]

BOOTSTRAP_MANIFEST = "_bootstrap.json"
_MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class KeyedStateBootstrap:
    """What :func:`~keyedstate.spark.bootstrap_keyed_state` wrote; pass it (or its ``path``) to
    ``keyed_process(..., initial_state=...)``.

    ``key_columns`` holds ``(name, Spark type)`` pairs; ``key_groups_with_state`` counts the key groups that got
    state; ``storage_options`` are the options the bootstrap was written with (used to read it back)."""

    path: str
    bootstrap_id: str
    state_backend: str
    num_key_groups: int
    key_columns: tuple[tuple[str, str], ...]
    key_groups_with_state: int
    storage_options: Optional[StorageOptions] = field(default=None, repr=False)


@dataclass(frozen=True)
class InitialState:
    """The executors' view of a bootstrap: where it is and each key group's row file."""

    location: str
    bootstrap_id: str
    rows: Mapping[int, FileEntry]
    storage_options: Optional[StorageOptions] = None
    watermark_ms: Optional[int] = None
    """A savepoint's: the watermark the source query would have run its next batch with. The new query's
    watermark never falls below it, so timers and late elements behave as if the old query had continued."""
    recorded_states: tuple[dict[str, Any], ...] = ()
    """A savepoint's: the states its query recorded (metadata JSON), which a query starting from it is checked
    against before it loads anything."""

    def holds(self, key_group: int) -> bool:
        return key_group in self.rows

    def storage(self) -> CheckpointStorage:
        return storage_at(self.location, self.storage_options)

    def row(self, key_group: int) -> Optional[StateRow]:
        """The bootstrapped row of ``key_group`` (None when the bootstrap gave it no state), verified."""
        entry = self.rows.get(key_group)
        if entry is None:
            return None
        where = Where(f"key group {key_group}'s row of bootstrap {self.bootstrap_id}")
        data = self.storage().read_verified(entry, where)
        try:
            return StateRow(*msgpack.unpackb(data, raw=False))
        except Exception as error:  # msgpack raises several unrelated types for garbage
            raise SnapshotCorruptedError(f"{entry.path} in {self.location} cannot be decoded ({error})") from error


_STORAGES: dict[tuple[str, str], CheckpointStorage] = {}


def storage_at(location: str, options: Optional[StorageOptions]) -> CheckpointStorage:
    """The storage at ``location``, one per worker process (creating one checks the root: a request)."""
    key = (location, repr(options))  # StorageOptions holds a dict: not hashable
    storage = _STORAGES.get(key)
    if storage is None:
        storage = _STORAGES[key] = CheckpointStorage(location, options=options)
    return storage


def new_bootstrap_storage(path: str, options: Optional[StorageOptions]) -> CheckpointStorage:
    """The storage at ``path`` for a new bootstrap or savepoint; refuses a path that already holds one."""
    try:
        storage = CheckpointStorage(path, options=options)
        existing = read_bootstrap_manifest(path, options)
    except (SnapshotError, ConfigurationError) as error:
        raise ConfigurationError(f"path {redact_uri(path)!r} is not usable: {error}") from error
    if existing is not None:
        raise ConfigurationError(f"path {redact_uri(path)!r} already holds a savepoint or bootstrap "
                                 f"({existing['bootstrap_id']}, {BOOTSTRAP_MANIFEST}); queries may be reading it. "
                                 f"Write to a new path")
    return storage


def encode_row(row: StateRow) -> bytes:
    return msgpack.packb(list(row.to_tuple()), use_bin_type=True)


def write_bootstrap_manifest(storage: CheckpointStorage, bootstrap: KeyedStateBootstrap, function_name: str,
                             rows: Mapping[int, FileEntry], created_at_ms: int,
                             savepoint: Optional[Mapping[str, Any]] = None) -> None:
    """Commit a bootstrap (or savepoint: ``savepoint`` is then its section, see :mod:`keyedstate.spark.savepoints`)
    by writing its manifest, after every row file it names."""
    body: dict[str, Any] = {
        "format": _MANIFEST_FORMAT, "bootstrap_id": bootstrap.bootstrap_id, "state_backend": bootstrap.state_backend,
        "num_key_groups": bootstrap.num_key_groups, "key_columns": [list(pair) for pair in bootstrap.key_columns],
        "function": function_name, "created_at_ms": created_at_ms,
        "rows": {str(key_group): entry.to_json() for key_group, entry in sorted(rows.items())},
    }
    if savepoint is not None:
        body["savepoint"] = dict(savepoint)
    storage.write_bytes(BOOTSTRAP_MANIFEST, json.dumps(body, indent=1).encode(), BOOTSTRAP_MANIFEST)


def read_bootstrap_manifest(path: str, options: Optional[StorageOptions]) -> Optional[dict[str, Any]]:
    """The bootstrap manifest at ``path`` (None when there is none)."""
    storage = CheckpointStorage(path, options=options)
    if not any(name == BOOTSTRAP_MANIFEST for name, _, _ in storage.list_entries("")):
        return None
    data = storage.read_bytes(BOOTSTRAP_MANIFEST)
    try:
        body = json.loads(data)
        if body["format"] != _MANIFEST_FORMAT:
            raise ValueError(f"format {body['format']} is not {_MANIFEST_FORMAT}")
        return dict(body)
    except (ValueError, KeyError, TypeError) as error:
        raise SnapshotCorruptedError(f"{BOOTSTRAP_MANIFEST} in {path} cannot be read ({error}); it was not written "
                                     f"by this keyedstate version's bootstrap_keyed_state") from error


def resolve_initial_state(initial_state: Union[str, os.PathLike[str], KeyedStateBootstrap], *, state_backend: str,
                          num_key_groups: Optional[int], key_types: Sequence[str],
                          storage_options: Optional[StorageOptions], call: str = "keyed_process") -> InitialState:
    """Find the bootstrap ``initial_state`` names and check it fits the query; raises ConfigurationError naming the
    mismatch and its fix."""
    if isinstance(initial_state, KeyedStateBootstrap):
        path, options = initial_state.path, initial_state.storage_options or storage_options
    elif isinstance(initial_state, (str, os.PathLike)):
        path, options = os.fspath(initial_state), storage_options
    else:
        raise ConfigurationError(f"initial_state must be the path bootstrap_keyed_state or write_savepoint wrote to, "
                                 f"or what they returned, got {type(initial_state).__qualname__}")
    if num_key_groups is None:
        raise ConfigurationError(f"initial_state needs key groups; {call} with num_key_groups=None cannot start "
                                 f"from a bootstrap. Pass the num_key_groups the bootstrap was written with")
    try:
        body = read_bootstrap_manifest(path, options)
    except (SnapshotError, ConfigurationError) as error:
        raise ConfigurationError(f"initial_state {redact_uri(path)!r} is not readable: {error}") from error
    if body is None:
        raise ConfigurationError(
            f"initial_state {path!r} holds no bootstrap or savepoint ({BOOTSTRAP_MANIFEST} is missing): give the path "
            f"bootstrap_keyed_state or write_savepoint wrote to; one that failed or was interrupted writes no "
            f"{BOOTSTRAP_MANIFEST} (it is written last), run it again")
    is_savepoint = "savepoint" in body
    written = "a savepoint written for" if is_savepoint else "bootstrapped with"

    def again(setting: str) -> str:
        if is_savepoint:  # a savepoint is re-written from itself: cheap, and the old one stays valid
            return (f"write the savepoint again for the query: write_savepoint(spark, {path!r}, <new path>, "
                    f"{setting}), and start from the new one")
        return f"bootstrap again with {setting}, or write a savepoint from the bootstrap with write_savepoint"

    if body["state_backend"] != state_backend:
        raise ConfigurationError(
            f"initial_state {path!r} is {written} state_backend={body['state_backend']!r} but {call} runs with "
            f"state_backend={state_backend!r}; run the query with state_backend={body['state_backend']!r}, or "
            f"{again(f'state_backend={state_backend!r}')}")
    if body["num_key_groups"] != num_key_groups:
        raise ConfigurationError(
            f"initial_state {path!r} is {written} num_key_groups={body['num_key_groups']} but {call} runs with "
            f"num_key_groups={num_key_groups}; a key's key group depends on it. Run the query with "
            f"num_key_groups={body['num_key_groups']}, or {again(f'num_key_groups={num_key_groups}')}")
    bootstrapped = [str(type_name) for _, type_name in body["key_columns"]]
    if bootstrapped != list(key_types):
        raise ConfigurationError(
            f"initial_state {path!r} was bootstrapped with key columns of types ({', '.join(bootstrapped)}) but the "
            f"query's key columns have types ({', '.join(key_types)}); a key's key group depends on its type. Cast "
            f"the key columns to the same types")
    rows = {int(key_group): FileEntry.from_json(entry) for key_group, entry in body["rows"].items()}
    savepoint = body.get("savepoint") or {}
    watermark = savepoint.get("next_batch_watermark_ms")
    recorded = (savepoint.get("query_settings") or {}).get("states") or ()
    return InitialState(path, str(body["bootstrap_id"]), rows, options,
                        int(watermark) if watermark is not None else None,
                        tuple({k: v for k, v in state.items() if k != "since_batch"} for state in recorded))


def check_origin(key_group: int, recorded: Optional[str], initial: Optional[InitialState]) -> None:
    """Refuse a committed row of ``key_group`` whose bootstrap id (``recorded``; None: none) is not the query's."""
    expected = initial.bootstrap_id if initial is not None else None
    if recorded == expected:
        return
    if initial is None:
        raise ConfigurationError(
            f"key group {key_group}'s committed state started from the initial state of bootstrap {recorded}, but "
            f"the query now runs without initial_state; key groups it has not run yet would start empty. Restart "
            f"with initial_state=<the path that bootstrap was written to>")
    if recorded is None:
        raise ConfigurationError(
            f"the query's checkpoint already holds state (key group {key_group}) that did not start from "
            f"initial_state {initial.location!r}; an initial state only starts a query with a new checkpoint. Use a "
            f"new checkpoint location, or drop initial_state to continue this checkpoint")
    raise ConfigurationError(
        f"key group {key_group}'s committed state started from bootstrap {recorded}, but initial_state "
        f"{initial.location!r} is bootstrap {initial.bootstrap_id}; restart with the initial_state the checkpoint "
        f"started from, or use a new checkpoint location")
