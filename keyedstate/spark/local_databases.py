"""The executor-local RocksDB databases of RocksDB mode: where they are, which committed version each holds, who
uses one now, and removing those no key group has used for a while.

Layout below the local directory::

    <query id>/<uid>/kg-00007/           the key group's database (RocksDB files)
    <query id>/<uid>/kg-00007/KEYEDSTATE-TAG   the tag of the committed version the database holds (absent while a
                                         call runs or after one failed)
    <query id>/<uid>/kg-00007.c1/        a second copy of it, and so on up to MAX_COPIES (see below)
    <query id>/<uid>/kg-00007.changelogs/   the key group's changelogs written on this machine (see
                                         keyedstate.spark.local_changelogs), shared by its copies
    <query id>/<uid>/kg-00007.lock       flock'ed by the worker process that uses the database or keeps it open
                                         (any process on the machine may run the key group's next call); holds
                                         that process's pid
    workers/<pid>.fifo                   where a process that keeps databases open takes requests to close one
    handles/<pid>/kg-00007.<random>      a symbolic link to a database, the path a process opened it with (see
                                         LocalDatabases.handle)
    idle/<pid>-<n>/                      each store's empty database in a worker process (holds the states'
                                         registrations; one per query a worker runs)

Spark does not say when an executor stops running a key group, so a database unused for :data:`IDLE_SECONDS` is
removed (under its lock); if the key group comes back, it is rebuilt from storage. Its cached changelogs go with
its last copy.

Copies: Spark gives a partition's next task to any of an executor's Python workers, and RocksDB lets one process
open a database. Rather than have the worker that keeps a key group's database open close it for the next one (an
open, flush and close per key group and move), each worker process keeps a copy of its own, locked like any
database: the caller takes a free copy, and a copy a few versions behind catches up by replaying the changelogs it
missed (``KeyGroupVersions.changelogs_after``). Copies are made as workers need them, at most :data:`MAX_COPIES`
per key group; past that a worker asks a holder to give one up.
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
from keyedstate.spark.local_changelogs import CHANGELOGS_SUFFIX
from keyedstate.state.key_groups.copy_markers import TAG_FILE, read_tag, remove_tag, write_tag
from keyedstate.state.key_groups.timer_counts import TIMER_COUNTS_SUFFIX
from keyedstate.state.rocksdb.errors import translate

__all__ = ["LocalDatabases", "TAG_FILE", "IDLE_SECONDS", "MAX_COPIES", "process_alive"]

logger = logging.getLogger("keyedstate.spark.rocksdb")

IDLE_SECONDS = 900.0
"""A local database unused for this long is removed (15 minutes: far longer than any trigger interval)."""
MAX_COPIES = max(4, min(8, 2 * (os.cpu_count() or 2)))
"""Copies of a key group's database per executor: one per Python worker process that may run it, two per core
(a task that writes to a Python data source, such as the keyedstate-kafka sink, runs the sink's writer in a second
worker beside the stateful function's, and either may run the function in a later task), at least 4 and at most 8;
each costs the key group's state in local disk, and only workers that run the key group make one."""
_SWEEP_EVERY_SECONDS = 60.0
_ASK_AGAIN_SECONDS = 1.0  # a holder that was running a call on the database when asked closes it after the call


class LocalDatabases:
    """The local databases below ``root``, as one worker process sees them."""

    def __init__(self, root: str, lock_timeout_seconds: float = 300.0) -> None:
        self.root = os.path.abspath(root)
        self.lock_timeout_seconds = lock_timeout_seconds
        self._next_sweep = 0.0
        os.makedirs(self.root, exist_ok=True)

    def path(self, query_id: str, uid: str, key_group: int) -> str:
        return os.path.join(self.root, query_id, uid, f"kg-{key_group:05d}")

    def copies(self, query_id: str, uid: str, key_group: int) -> list[str]:
        """The paths of the key group's database copies, the first one (:meth:`path`) first."""
        first = self.path(query_id, uid, key_group)
        return [first] + [f"{first}.c{number}" for number in range(1, MAX_COPIES)]

    def timer_counts_path(self, query_id: str, uid: str, key_group: int) -> str:
        """The file of the key group's timer counts (:mod:`keyedstate.state.key_groups.timer_counts`)."""
        return self.path(query_id, uid, key_group) + TIMER_COUNTS_SUFFIX

    def changelogs_path(self, query_id: str, uid: str, key_group: int) -> str:
        """Where the key group's changelogs written on this machine are kept (see
        :mod:`keyedstate.spark.local_changelogs`)."""
        return self.path(query_id, uid, key_group) + CHANGELOGS_SUFFIX

    def idle_path(self) -> str:
        """This process's idle database; those of processes that are gone are removed."""
        for directory in glob.glob(os.path.join(self.root, "idle", "*")) + glob.glob(
                os.path.join(self.root, "handles", "*")):
            pid = os.path.basename(directory).split("-")[0]
            if pid.isdigit() and not process_alive(int(pid)):
                shutil.rmtree(directory, ignore_errors=True)
        idle = os.path.join(self.root, "idle", f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
        shutil.rmtree(idle, ignore_errors=True)
        return idle

    def acquire(self, path: str) -> int:
        """Wait for and take the lock of the database at ``path``; returns the descriptor :meth:`release` takes.

        A worker process that keeps the database open between calls (:mod:`keyedstate.spark.open_databases`) is
        asked to close it; one that is running a call on it finishes first."""
        deadline = time.monotonic() + self.lock_timeout_seconds
        started = time.monotonic()
        asked_at: Optional[float] = None
        while True:
            descriptor = self.try_acquire(path)
            if descriptor is not None:
                return descriptor
            now = time.monotonic()
            if now >= deadline:
                raise StateBackendLockedError(
                    f"the local state database {path} is still in use by another worker process after "
                    f"{self.lock_timeout_seconds:g} s; a task attempt of the same key group has not finished"
                )
            if asked_at is None or now - asked_at >= _ASK_AGAIN_SECONDS:
                self.ask_to_release(path)
                asked_at = now
            time.sleep(0.002 if now - started < 0.5 else 0.05)  # a handover takes a few ms; a running call longer

    @staticmethod
    def try_acquire(path: str) -> Optional[int]:
        """The lock of the database at ``path`` if no process holds it now (see :meth:`acquire`), else None."""
        try:
            descriptor = _try_lock(path + ".lock")
        except OSError as error:  # out of descriptors or disk, or the local directory not writable
            raise translate(error, "lock the local state database", path) from error
        if descriptor is not None:
            try:
                _write_holder(descriptor)
            except OSError as error:
                os.close(descriptor)
                raise translate(error, "lock the local state database", path) from error
        return descriptor

    @staticmethod
    def release(descriptor: int) -> None:
        os.close(descriptor)  # closing the descriptor releases the flock

    @staticmethod
    def owns(path: str, descriptor: int) -> bool:
        """Whether the lock ``descriptor`` holds is still the lock file at ``path`` (the same file, not one created
        after the directory and its lock were deleted under us: then another process may own ``path`` now, and
        nothing of ours may be written into it)."""
        try:
            held, current = os.fstat(descriptor), os.stat(path + ".lock")
        except OSError:
            return False
        return (held.st_ino, held.st_dev) == (current.st_ino, current.st_dev)

    def handle(self, path: str) -> str:
        """A new path of this process's own leading to the database at ``path`` (a symbolic link below
        ``handles/<pid>/``), to open it with. RocksDB creates and deletes files by the path it was opened with, and
        keys its in-process lock registry by it: a process that lost ``path`` (:meth:`owns`) removes its handle and
        closes the database without touching the directory another process owns now, and can open that path
        again later."""
        directory = os.path.join(self.root, "handles", str(os.getpid()))
        os.makedirs(directory, exist_ok=True)
        link = os.path.join(directory, f"{os.path.basename(path)}.{uuid.uuid4().hex[:8]}")  # uids can be long
        os.symlink(os.path.abspath(path), link)
        return link

    def drop_handle(self, handle: str) -> None:
        """Remove a :meth:`handle` (nothing else: a database opened at its real path keeps it)."""
        if os.path.dirname(os.path.dirname(handle)) == os.path.join(self.root, "handles"):
            try:
                os.remove(handle)
            except FileNotFoundError:
                pass

    def request_channel(self, pid: int) -> str:
        """The FIFO on which the worker process ``pid`` takes requests to close databases it keeps open."""
        return os.path.join(self.root, "workers", f"{pid}.fifo")

    def ask_to_release(self, path: str) -> bool:
        """Ask the process holding ``path``'s lock to close the database; False when it takes no requests."""
        try:
            with open(path + ".lock", encoding="ascii") as file:
                pid = int(file.read().strip() or "0")
        except (OSError, ValueError):
            return False
        if pid <= 0 or pid == os.getpid():
            return False
        try:
            channel = os.open(self.request_channel(pid), os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no such process listening (it keeps nothing open, or is gone)
            return False
        try:
            os.write(channel, os.fsencode(path) + b"\n")  # one write below PIPE_BUF: never interleaved
        except OSError:
            return False
        finally:
            os.close(channel)
        return True

    read_tag = staticmethod(read_tag)
    write_tag = staticmethod(write_tag)
    remove_tag = staticmethod(remove_tag)

    def sweep(self, idle_seconds: float = IDLE_SECONDS, force: bool = False) -> list[str]:
        """Remove databases unused for ``idle_seconds`` (at most once a minute unless ``force``). Used = the newer of
        the tag and the lock file, which every taker touches: a database whose process died while it held it open
        has no tag but ages all the same."""
        now = time.time()
        if not force and now < self._next_sweep:
            return []
        self._next_sweep = now + _SWEEP_EVERY_SECONDS
        removed = []
        for lock_path in glob.glob(os.path.join(self.root, "*", "*", "kg-*.lock")):
            path = lock_path[: -len(".lock")]
            if now - _last_used(path) < idle_seconds:
                continue
            descriptor = _try_lock(lock_path)
            if descriptor is None:
                continue  # in use right now
            try:
                if now - _last_used(path) >= idle_seconds:
                    shutil.rmtree(path, ignore_errors=True)
                    os.remove(lock_path)
                    removed.append(path)
            except OSError:
                pass
            finally:
                os.close(descriptor)
        if removed:
            logger.info("removed %d local state databases unused for %.0f s: %s", len(removed), idle_seconds,
                        ", ".join(removed))
        self._sweep_changelogs()
        return removed

    def _sweep_changelogs(self) -> None:
        """Remove the cached changelogs and timer counts of key groups with no database left here: only a copy uses
        them. (One created meanwhile by a first call loses them to this: it reads storage, or counts, instead.)"""
        for suffix in (CHANGELOGS_SUFFIX, TIMER_COUNTS_SUFFIX):
            for path in glob.glob(os.path.join(self.root, "*", "*", "kg-*" + suffix)):
                first = glob.escape(path[: -len(suffix)])
                if not glob.glob(first + ".lock") and not glob.glob(first + ".c*.lock"):
                    if os.path.isdir(path):
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        _remove_quietly(path)
                    logger.debug("removed %s: no local state database of the key group is left", path)


def _last_used(path: str) -> float:
    used = 0.0
    for name in (path + ".lock", os.path.join(path, TAG_FILE)):
        try:
            used = max(used, os.path.getmtime(name))
        except OSError:
            pass
    return used


def _write_holder(descriptor: int) -> None:
    """The holder's pid in the lock file (read by :meth:`LocalDatabases.ask_to_release`); also marks it used."""
    data = str(os.getpid()).encode()
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, data, 0)


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


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
