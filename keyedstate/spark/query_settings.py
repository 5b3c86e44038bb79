"""The settings a query's committed state depends on, recorded with the state and checked before a restart runs.

A restarted query may change its code and options, but some options decide where a key's state is found or how it
is read: the number of key groups and their layout (which Spark group holds a key), the key columns' types (the key
group is a hash of their values), the state backend, the time mode, the bootstrap the state started from, and each
state's kind, type and TTL. Changing one of them silently would start keys again from empty state (Flink refuses
such a savepoint at restore, never later).

So the first call of every worker process in a run reads ``query-settings.json`` below the operator's storage scope
(``<state_storage>/<query id>/<uid>/``, the directory RocksDB mode keeps its files in; the heap backend keeps only
this record there) and compares. An incompatible change raises :class:`~keyedstate.errors.RestartSettingsChangedError`
(or the state's own compatibility error) before the call loads or processes anything, so the batch fails and nothing
is committed. The record is written in the first batch that runs and changes only by states added or removed later
(see docs/operations.md, "State schema evolution": a state's recorded type is the one it was first stored with, and
a restart must be able to read it as the new type, as is or after a migration); an entry written in the batch being
run again (it never committed) may be replaced, so a failed first attempt never pins a setting.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Optional

from keyedstate.checkpoint.locations import join_location
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import (
    KeyedStateError,
    RestartSettingsChangedError,
    StateDescriptorConflictError,
    StateTypeMismatchError,
)
from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.base.evolution import check_evolution
from keyedstate.state.base.kinds import HEAP
from keyedstate.state.descriptors import StateDescriptor

__all__ = ["QuerySettings", "SETTINGS_RECORD", "check_restart_settings", "operator_storage_location"]

logger = logging.getLogger("keyedstate.spark.restart")

SETTINGS_RECORD = "query-settings.json"
_FORMAT = 1
_MIGRATE = ("or move the state to a new checkpoint with the new value: read it with read_keyed_state_frame and "
            "write it with bootstrap_keyed_state, then start the new query with initial_state=")


def operator_storage_location(state_storage: str, query_id: str, uid: str) -> str:
    """Where one operator of one query keeps its durable files: ``<state_storage>/<query id>/<uid>``."""
    return join_location(state_storage, query_id, uid)


@dataclass(frozen=True)
class QuerySettings:
    """What the committed state of one ``keyed_process`` / ``keyed_co_process`` operator depends on."""

    key_types: tuple[str, ...]  # the key columns' Spark types, in order (their names may change)
    num_key_groups: Optional[int]  # None: grouped by the user key
    key_group_layout: str
    state_backend: str
    time_mode: str
    initial_state: Optional[str]  # the id of the bootstrap the state started from

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "key_types": list(self.key_types)}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "QuerySettings":
        return cls(tuple(value["key_types"]), value["num_key_groups"], value["key_group_layout"],
                   value["state_backend"], value["time_mode"], value["initial_state"])


def _fix(name: str, old: Any, new: Any) -> str:
    """Why a change of setting ``name`` from ``old`` to ``new`` cannot be applied in place, and what to do."""
    keep = f"Restart with {name}={old!r}"
    if name == "num_key_groups":
        return (f"a key's key group depends on the number of key groups, so keys would start again from empty "
                f"state. {keep}, {_MIGRATE}... (bootstrap with num_key_groups={new!r})")
    if name == "key_group_layout":
        return f"the layout decides which Spark group holds each key group's state. {keep}"
    if name == "key_types":
        return (f"the key group is a hash of the key columns' values as typed, so keys would move to other key "
                f"groups. Cast the key columns back to {', '.join(old)} before keyed_process")
    if name == "state_backend":
        return (f"the committed state is in the other backend's format. {keep}, {_MIGRATE}... "
                f"(bootstrap with state_backend={new!r})")
    if name == "time_mode":
        return f"pending timers and Spark's timeout kind were set up for {old}. {keep}"
    # initial_state
    if old is None:
        return ("the checkpoint already holds state that did not start from a bootstrap, and initial_state only "
                "seeds a new query. Use a new checkpoint location to start from the bootstrap, or drop "
                "initial_state")
    if new is None:
        return (f"key groups that have not run yet would start empty instead of from bootstrap {old}. Pass the "
                f"same initial_state on every restart of this checkpoint")
    return (f"the checkpoint's state started from bootstrap {old!r}; a checkpoint cannot switch bootstraps. Pass "
            f"the initial_state it started from, or start a new checkpoint from the new bootstrap")


def _label(name: str, value: Any) -> str:
    if name == "key_types":
        return f"key column types ({', '.join(value)})"
    if name == "initial_state":
        return "no initial_state" if value is None else f"initial_state of bootstrap {value!r}"
    return f"{name}={value!r}"


def _setting_changes(old: QuerySettings, new: QuerySettings) -> list[str]:
    changes = []
    for name, old_value in asdict(old).items():
        new_value = getattr(new, name)
        if name == "key_types":
            old_value = tuple(old_value)
        if old_value != new_value:
            changes.append(f"its state was written with {_label(name, old_value)}, but it now runs with "
                           f"{_label(name, new_value)}: {_fix(name, old_value, new_value)}")
    return changes


def _state_change(recorded: StateMetadata, descriptor: Optional[StateDescriptor]) -> Optional[str]:
    if descriptor is None:
        return None
    try:
        check_evolution(recorded, descriptor)
    except (StateTypeMismatchError, StateDescriptorConflictError) as error:
        return str(error)
    return None


_Entry = tuple[StateMetadata, int]  # a state's metadata and the batch it was recorded in


def _record_of_another_uid(query_storage: CheckpointStorage, uid: str, settings: QuerySettings, batch: int,
                           call: str) -> Optional[tuple[QuerySettings, int, dict[str, _Entry], dict[str, Any]]]:
    """The binding record another ``uid`` of this query wrote, when exactly one did: this operator ran under that
    uid. In RocksDB mode its state files are below that uid's directory, so the change is refused."""
    others = []
    for name, is_dir, _ in query_storage.list_entries("") if query_storage.exists() else ():
        if is_dir and name != uid:
            other = _read(CheckpointStorage(join_location(query_storage.location, name),
                                            options=query_storage.options))
            if other is not None and other[1] < batch:  # committed before this batch: not an operator's first run
                others.append((name, other))
    if len(others) != 1:  # none, or several operators of one query: nothing tells which one this was
        return None
    old_uid, other = others[0]
    if settings.state_backend != HEAP:
        raise RestartSettingsChangedError(
            f"{call} cannot restart on this checkpoint (batch {batch} would be the first of this run; nothing was "
            f"committed): its state was written with uid={old_uid!r}, but it now runs with uid={uid!r}; its RocksDB "
            f"state lives below the uid's directory of state_storage. Keep uid={old_uid!r} (pass it to {call}; "
            f"the default uid is derived from the function's class name), or move the state to the new uid through "
            f"a savepoint (stop_with_savepoint, then initial_state= in a query with a new checkpoint)")
    logger.warning("%s: this query's settings were recorded under uid %r; it now runs with uid %r and its record "
                   "moves there", call, old_uid, uid)
    return other


def _check_starting_states(starting: Iterable[StateMetadata], descriptors: dict[str, StateDescriptor], batch: int,
                           call: str) -> None:
    problems = [problem for state in starting if (problem := _state_change(state, descriptors.get(state.name)))]
    if problems:
        raise RestartSettingsChangedError(
            f"{call} cannot start from its savepoint (batch {batch} would be the first of this run; nothing was "
            f"committed): " + "; ".join(problems))


def check_restart_settings(storage: CheckpointStorage, settings: QuerySettings,
                           states: Iterable[StateDescriptor], batch_id: Optional[int], call: str,
                           starting_states: Iterable[StateMetadata] = (),
                           query_storage: Optional[CheckpointStorage] = None, uid: Optional[str] = None,
                           holds_state: bool = True) -> dict[str, int]:
    """Compare ``settings`` and the function's registered ``states`` (their descriptors, which may declare
    migrations) with the record in ``storage``; raise before anything runs when the committed state cannot be used
    with them, else record what is new. Returns each registered state's incarnation when not 0 (see
    :class:`~keyedstate.state.base.backend.StateMetadata`): a state dropped and registered again must not read
    what an earlier incarnation left in key groups not written since. ``starting_states``: the states recorded by
    the query a savepoint was written from, which a new query's first run is checked against the same way.
    ``query_storage`` (``<state_storage>/<query id>``) and ``uid``: where the records of the query's operators are,
    to tell a changed ``uid`` from a checkpoint written before records were kept. ``holds_state``: whether the
    key group being called has committed state; without it, a missing record at a later batch is what a new query
    whose first batches brought no data leaves, not the sign of an older checkpoint."""
    descriptors = {descriptor.name: descriptor for descriptor in states}
    registered = {name: StateMetadata.of(descriptor) for name, descriptor in descriptors.items()}
    batch = batch_id if batch_id is not None else 0
    record = _read(storage)
    if record is None or record[1] >= batch:
        _check_starting_states(starting_states, descriptors, batch, call)
    if record is None and batch > 0 and query_storage is not None and uid is not None:
        record = _record_of_another_uid(query_storage, uid, settings, batch, call)
        if record is not None:  # heap mode: the state is in Spark's store; the record moves to the new uid
            _write(storage, *record)
    if record is None and batch > 0 and not holds_state:
        logger.info("%s: batch %d finds no settings record (no earlier batch ran a key-group call, or a keyedstate "
                    "version that did not record settings wrote the checkpoint); recording the current ones",
                    call, batch)
    elif record is None and batch > 0:
        logger.warning(
            "%s: batch %d runs on a checkpoint whose settings were not recorded (written by a keyedstate version "
            "that did not record them); recording the current ones. Until this batch commits, a change of "
            "num_key_groups, key_group_layout or key column types is caught only in key groups that already "
            "hold state", call, batch)
    if record is None or record[1] >= batch:  # one written by an attempt of this batch or later never committed
        _write(storage, settings, batch, {name: (state, batch) for name, state in registered.items()}, {})
        return {}
    recorded_settings, since, recorded_states, dropped = record
    # a drop recorded by an attempt that never committed is undone (the attempt committed nothing)
    undone = [name for name, (_, _, dropped_batch) in dropped.items() if dropped_batch >= batch]
    for name in undone:
        state, state_since, _ = dropped.pop(name)
        recorded_states.setdefault(name, (state, state_since))
    problems = _setting_changes(recorded_settings, settings)
    for name, (state, state_since) in recorded_states.items():
        if state_since < batch:
            problem = _state_change(state, descriptors.get(name))
            if problem is not None:
                problems.append(problem)
    if problems:
        raise RestartSettingsChangedError(
            f"{call} cannot restart on this checkpoint (batch {batch} would be the first of this run; nothing was "
            f"committed): " + "; ".join(problems))
    kept = {name: entry for name, entry in recorded_states.items() if entry[1] < batch}
    removed = sorted(name for name in kept if name not in registered)
    if removed:
        logger.warning("%s: state(s) %s hold committed data but are not registered by the function any more: their "
                       "data is dropped from each key group when the key group is next written, and a state "
                       "registered later under the same name starts empty", call, ", ".join(map(repr, removed)))
        for name in removed:
            state, state_since = kept.pop(name)
            dropped[name] = (state, state_since, batch)
    added = {}
    for name, state in registered.items():
        if name not in kept:
            earlier = dropped.get(name)
            incarnation = earlier[0].incarnation + 1 if earlier is not None else 0
            added[name] = (replace(state, incarnation=incarnation), batch)
    if added:
        logger.info("%s: new state(s) %s start empty", call, ", ".join(map(repr, sorted(added))))
    if added or removed or undone:
        _write(storage, recorded_settings, since, {**kept, **added}, dropped)
    return {name: state.incarnation for name, (state, _) in {**kept, **added}.items() if state.incarnation}


def _read(storage: CheckpointStorage) -> Optional[tuple[QuerySettings, int, dict[str, _Entry],
                                                        dict[str, tuple[StateMetadata, int, int]]]]:
    if not any(name == SETTINGS_RECORD for name, is_dir, _ in storage.list_entries("") if not is_dir):
        return None
    body = json.loads(storage.read_bytes(SETTINGS_RECORD))
    if body.get("format") != _FORMAT:
        raise KeyedStateError(f"{SETTINGS_RECORD} in {storage.location} has format {body.get('format')!r}; this "
                              f"keyedstate reads format {_FORMAT}: it was written by a newer keyedstate. Upgrade "
                              f"keyedstate")
    states = {entry["name"]: (StateMetadata.from_json(entry), int(entry["since_batch"])) for entry in body["states"]}
    dropped = {entry["name"]: (StateMetadata.from_json(entry), int(entry["since_batch"]), int(entry["dropped_batch"]))
               for entry in body.get("dropped_states", [])}
    return QuerySettings.from_json(body["settings"]), int(body["since_batch"]), states, dropped


def _write(storage: CheckpointStorage, settings: QuerySettings, since: int, states: dict[str, _Entry],
           dropped: dict[str, tuple[StateMetadata, int, int]]) -> None:
    # Deterministic content: every worker process of a batch writes the same bytes, so concurrent writes agree.
    body: dict[str, Any] = {
        "format": _FORMAT, "since_batch": since, "settings": settings.to_json(),
        "states": [{**state.to_json(), "since_batch": state_since}
                   for _, (state, state_since) in sorted(states.items())]}
    if dropped:  # states removed from the function, kept so that one registered again gets a new incarnation
        body["dropped_states"] = [{**state.to_json(), "since_batch": state_since, "dropped_batch": dropped_batch}
                                  for _, (state, state_since, dropped_batch) in sorted(dropped.items())]
    storage.replace_bytes(SETTINGS_RECORD, json.dumps(body, sort_keys=True).encode())


def recorded_settings(storage: CheckpointStorage) -> Optional[dict[str, Any]]:
    """The settings record in ``storage`` as written (its JSON body), or None when there is none: what a savepoint
    copies and reads the key types from."""
    if _read(storage) is None:  # checks the format
        return None
    return dict(json.loads(storage.read_bytes(SETTINGS_RECORD)))
