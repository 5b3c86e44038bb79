"""The executor-local RocksDB databases of RocksDB mode: where they are, which committed version each holds, who
uses one now, and removing those no key group has used for a while.

Layout below the local directory::

    <query id>/<uid>/kg-00007/           the key group's database (RocksDB files)
    <query id>/<uid>/kg-00007/KEYEDSTATE-TAG   the tag of the committed version the database holds (absent while a
                                         call runs or after one failed)
    <query id>/<uid>/kg-00007.lock       flock'ed by the worker process that uses the database (any process on the
                                         machine may run the key group's next call)
    idle/<pid>-<n>/                      each store's empty database in a worker process (holds the states'
                                         registrations; one per query a worker runs)

Spark does not say when an executor stops running a key group, so a database whose tag is older than
:data:`IDLE_SECONDS` is removed (under its lock); if the key group comes back, it is rebuilt from storage.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import logging
import os
import shutil
import time
import uuid
from typing import Optional

from keyedstate.errors import StateBackendLockedError

__all__ = ["LocalDatabases", "TAG_FILE", "IDLE_SECONDS"]

logger = logging.getLogger("keyedstate.spark.rocksdb")

TAG_FILE = "KEYEDSTATE-TAG"
IDLE_SECONDS = 900.0
"""A local database unused for this long is removed (15 minutes: far longer than any trigger interval)."""
_SWEEP_EVERY_SECONDS = 60.0


class LocalDatabases:
    """The local databases below ``root``, as one worker process sees them."""

    def __init__(self, root: str, lock_timeout_seconds: float = 300.0) -> None:
        self.root = os.path.abspath(root)
        self.lock_timeout_seconds = lock_timeout_seconds
        self._held: Optional[tuple[int, str]] = None  # (lock file descriptor, database path)
        self._next_sweep = 0.0
        os.makedirs(self.root, exist_ok=True)

    def path(self, query_id: str, uid: str, key_group: int) -> str:
        return os.path.join(self.root, query_id, uid, f"kg-{key_group:05d}")

    def idle_path(self) -> str:
        """This process's idle database; those of processes that are gone are removed."""
        for directory in glob.glob(os.path.join(self.root, "idle", "*")):
            pid = os.path.basename(directory).split("-")[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(directory, ignore_errors=True)
        idle = os.path.join(self.root, "idle", f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
        shutil.rmtree(idle, ignore_errors=True)
        return idle

    # ---- the lock of one database --------------------------------------------------------------------------------

    def acquire(self, path: str) -> None:
        """Wait for and take the lock of the database at ``path`` (held until :meth:`release`)."""
        deadline = time.monotonic() + self.lock_timeout_seconds
        while True:
            descriptor = _try_lock(path + ".lock")
            if descriptor is not None:
                self._held = (descriptor, path)
                return
            if time.monotonic() >= deadline:
                raise StateBackendLockedError(
                    f"the local state database {path} is still in use by another worker process after "
                    f"{self.lock_timeout_seconds:g} s; a task attempt of the same key group has not finished"
                )
            time.sleep(0.05)

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            os.close(held[0])  # closing the descriptor releases the flock

    # ---- the committed version a database holds -------------------------------------------------------------------

    @staticmethod
    def read_tag(path: str) -> Optional[str]:
        try:
            with open(os.path.join(path, TAG_FILE), encoding="ascii") as file:
                return file.read().strip() or None
        except OSError:
            return None

    @staticmethod
    def write_tag(path: str, tag: str) -> None:
        temporary = os.path.join(path, f".{TAG_FILE}.{uuid.uuid4().hex[:8]}")
        with open(temporary, "w", encoding="ascii") as file:
            file.write(tag)
        os.replace(temporary, os.path.join(path, TAG_FILE))

    @staticmethod
    def remove_tag(path: str) -> None:
        try:
            os.remove(os.path.join(path, TAG_FILE))
        except FileNotFoundError:
            pass

    # ---- removing databases no key group uses --------------------------------------------------------------------

    def sweep(self, idle_seconds: float = IDLE_SECONDS, force: bool = False) -> list[str]:
        """Remove databases whose tag is older than ``idle_seconds`` (at most once a minute unless ``force``)."""
        now = time.time()
        if not force and now < self._next_sweep:
            return []
        self._next_sweep = now + _SWEEP_EVERY_SECONDS
        removed = []
        for tag in glob.glob(os.path.join(self.root, "*", "*", "kg-*", TAG_FILE)):
            path = os.path.dirname(tag)
            try:
                if now - os.path.getmtime(tag) < idle_seconds:
                    continue
            except OSError:
                continue
            descriptor = _try_lock(path + ".lock")
            if descriptor is None:
                continue  # in use right now
            try:
                if os.path.exists(tag) and now - os.path.getmtime(tag) >= idle_seconds:
                    shutil.rmtree(path, ignore_errors=True)
                    os.remove(path + ".lock")
                    removed.append(path)
            except OSError:
                pass
            finally:
                os.close(descriptor)
        if removed:
            logger.info("removed %d local state databases unused for %.0f s: %s", len(removed), idle_seconds,
                        ", ".join(removed))
        return removed


def _try_lock(lock_path: str) -> Optional[int]:
    """An exclusive flock on ``lock_path`` (created if missing), or None when another process holds it. A lock file
    removed by a sweep while we waited is not the database's lock any more: then try again with the new one."""
    while True:
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(descriptor)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        try:
            if os.fstat(descriptor).st_ino == os.stat(lock_path).st_ino:
                return descriptor
        except FileNotFoundError:
            pass
        os.close(descriptor)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
