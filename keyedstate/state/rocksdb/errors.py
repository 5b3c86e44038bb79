"""The one place where rocksdict's untyped exceptions become keyedstate errors.

rocksdict raises plain ``Exception`` with RocksDB's status text (``"IO error: While lock file: ...: Resource
temporarily unavailable"``), ``KeyError`` for wrong key types in raw mode and ``DbClosedError`` after ``close()``.
Everything that calls rocksdict catches broadly and passes the exception through :func:`translate`, so callers only
ever see :class:`~keyedstate.errors.StateBackendError` (or a subclass) with the path and the action that failed.
"""

from __future__ import annotations

from keyedstate.errors import KeyedStateError, StateBackendError, StateBackendLockedError
from keyedstate.state.rocksdb.options import open_files_limits

__all__ = ["translate", "is_lock_error"]

# RocksDB status texts that mean "another handle holds the LOCK file": one from another process (flock fails),
# one from another handle in this process (RocksDB's own in-process lock table).
_LOCK_MARKERS = ("While lock file", "lock hold by current process", "LOCK: Resource temporarily unavailable")


def is_lock_error(error: BaseException) -> bool:
    text = str(error)
    return any(marker in text for marker in _LOCK_MARKERS)


def translate(error: BaseException, action: str, path: str) -> KeyedStateError:
    """A keyedstate error for a rocksdict failure during ``action`` on the database at ``path``.

    keyedstate errors pass through unchanged (a serializer error raised inside a callback, for example).
    """
    if isinstance(error, KeyedStateError):
        return error
    text = str(error) or type(error).__name__
    if is_lock_error(error):
        return StateBackendLockedError(
            f"cannot {action}: the RocksDB database at {path} is locked by another process or another backend in "
            f"this process. Close the other backend, wait for the other process to exit, or give each "
            f"partition its own path ({text})"
        )
    if type(error).__name__ == "DbClosedError" or "already closed" in text:
        return StateBackendError(f"cannot {action}: the RocksDB backend at {path} is closed")
    if "Too many open files" in text:
        return StateBackendError(
            f"cannot {action}: this process has as many files open as its limit allows{_open_files_limit()} "
            f"({path}: {text}). Every open RocksDB database keeps its SST files open: raise the limit "
            f"(ulimit -n, LimitNOFILE, or the container's nofile limit), or cap the files of each database with "
            f"RocksDBOptions(max_open_files=...), or open fewer databases at once (on Spark: fewer key groups)")
    if "No space left" in text:
        return StateBackendError(f"cannot {action}: no space left on device at {path} ({text}); free space there, "
                                 f"or move the local databases (state_local_dir on Spark) to a disk with room")
    if "Corruption" in text:
        return StateBackendError(f"cannot {action}: the RocksDB database at {path} is corrupt ({text}); restore "
                                 f"it from a checkpoint")
    return StateBackendError(f"cannot {action} (RocksDB at {path}): {text}")


def _open_files_limit() -> str:
    soft, hard = open_files_limits()
    return f" (soft limit {soft or 'unlimited'}, hard limit {hard or 'unlimited'})"
