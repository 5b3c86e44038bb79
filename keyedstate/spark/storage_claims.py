"""Keeping two runs of one query out of one RocksDB-mode state directory (``<state_storage>/<query id>/<uid>``).

The directory's name holds the query id, which a copy of the query's checkpoint shares: a copy started with the same
``state_storage`` while its original still runs would write into the same directory. Their files never overwrite
each other (names carry unique tags), but each run's garbage collection deletes what the other's versions still name:
state would be lost or mixed.

So every run registers in ``_writers/<run id>.json`` (Spark gives each start of a query a new run id) and, before
the first call of each batch, a worker process lists ``_writers/``: when another run registered later than this one,
a second copy of the query started writing here while this run still runs, and this run fails with
:class:`~keyedstate.errors.StateStorageConflictError` (the later run is the one the user just started; the error
names both). Spark itself never runs two runs of one query at once, so a restart never trips it.

The check costs one LIST per worker process and batch, and one PUT per worker process and run. A copy started only
after its original stopped looks like a restart to the storage and is not detected.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Optional

from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import StateStorageConflictError

__all__ = ["WRITERS_DIR", "check_single_writer"]

WRITERS_DIR = "_writers"
_KEEP_REGISTRATIONS = 20  # of runs that stopped: only the newest can matter
_SUFFIX = ".json"

_checked_batch: dict[tuple[str, str], Optional[int]] = {}  # registered, and checked for this batch


def check_single_writer(storage: CheckpointStorage, run_id: str, batch_id: Optional[int]) -> None:
    """Register this run as a writer of ``storage``; fail if a run registered later is writing there too. Does the
    work once per worker process and batch."""
    key = (storage.location, run_id)
    if key in _checked_batch and _checked_batch[key] == batch_id:
        return
    writers = _list_writers(storage)
    mine = f"{run_id}{_SUFFIX}"
    if key not in _checked_batch and mine not in writers:
        storage.write_bytes(f"{WRITERS_DIR}/{mine}", json.dumps({
            "run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
            "registered_at_ms": time.time_ns() // 1_000_000}).encode(), mine)
        writers = _list_writers(storage)
        _forget_old_runs(storage, writers, mine)
    registered_at = writers.get(mine)
    for name, mtime in writers.items():
        if name != mine and registered_at is not None and mtime is not None and mtime > registered_at:
            raise StateStorageConflictError(
                f"another run of this query (run {name[:-len(_SUFFIX)]}) started writing to {storage.location} "
                f"while this run (run {run_id}) was still running: two queries with the same query id share one "
                f"state storage, which happens when a copy of a checkpoint runs with the same state_storage as its "
                f"original. Stop one of them; a copied checkpoint needs its own state_storage (and a copy of the "
                f"state files below it)"
            )
    _checked_batch[key] = batch_id


def _list_writers(storage: CheckpointStorage) -> dict[str, Optional[float]]:
    return {name: mtime for name, is_dir, mtime in storage.list_entries(WRITERS_DIR)
            if not is_dir and name.endswith(_SUFFIX)}


def _forget_old_runs(storage: CheckpointStorage, writers: dict[str, Optional[float]], mine: str) -> None:
    others = sorted((mtime or 0.0, name) for name, mtime in writers.items() if name != mine)
    stale = others[:-_KEEP_REGISTRATIONS]
    if stale:
        storage.delete_files(f"{WRITERS_DIR}/{name}" for _, name in stale)
