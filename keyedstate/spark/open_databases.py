"""Key-group databases a Python worker keeps open between calls, so a key group that comes back to the same worker
in the next micro-batch skips the open, flush and close (most of a small call's cost).

Spark reuses a Python worker for task after task (``spark.python.worker.reuse``, on by default) but may give a key
group's next call to any worker. A kept database stays locked (its ``.lock`` file names this process); another
worker takes a copy of its own (:mod:`keyedstate.spark.local_databases`), and only when every copy is held does it
ask for one: a listener thread serves those requests (:meth:`LocalDatabases.acquire` sends them over
``workers/<pid>.fifo``), flushing, closing and tagging the database and releasing the lock. The thread also closes
databases unused for :data:`KEEP_OPEN_SECONDS`, before
Spark's idle-worker cleanup (one minute without tasks) kills the worker with SIGKILL; a worker killed while it keeps
databases open leaves them without a tag, so they are rebuilt from durable storage, as after any crash.

A kept database is trusted only while it is open in this process: the tag it holds is in memory, and the ``TAG``
file is written when it is closed after a successful call. A process writes into a database directory only while
the lock file it holds is the one at the path: whoever deletes the directory with its lock (a disk cleanup, a test
losing local databases) lets another process lock a new file there, and the old holder then abandons its database
(never flushes or tags it).
"""

from __future__ import annotations

import glob
import logging
import os
import select
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

from keyedstate.spark.local_databases import LocalDatabases, process_alive
from keyedstate.state.key_groups.versioned import EMPTY_TAG
from keyedstate.state.rocksdb.options import open_files_limits

__all__ = ["OpenDatabases", "KeptDatabase", "KEEP_OPEN_SECONDS", "MAX_KEPT_DATABASES", "FILES_PER_DATABASE",
           "worker_reuse_enabled", "open_files_budget", "open_databases_of", "abandon"]

logger = logging.getLogger("keyedstate.spark.rocksdb")

KEEP_OPEN_SECONDS = 20.0
"""A kept database unused this long is closed (Spark kills a Python worker idle for a minute)."""
MAX_KEPT_DATABASES = 256
"""At most this many databases stay open per worker process and local directory (least recently used closed first),
at most as many column families as fit :attr:`RocksDBOptions.memtable_budget_bytes` (see
:meth:`OpenDatabases.limit_families`; their memtables share that budget and their block reads one block cache), and
at most as many open files as :func:`open_files_budget` allows (counted over every local directory: one limit)."""


FILES_PER_DATABASE = 6
"""Files a kept database holds open besides its SST files: RocksDB's LOCK, LOG, MANIFEST and write-ahead log, its
directory, and the lock file of :mod:`keyedstate.spark.local_databases`."""


def open_files_budget() -> Optional[int]:
    """How many files the databases this process keeps may hold open: half of its limit of open files (the rest
    stays for Spark's sockets, the running call's database and everything else), None without a limit. Every SST
    file of an open database stays open (``RocksDBOptions.max_open_files`` -1), so a worker that kept every key
    group it ran would otherwise fail with "Too many open files" under a limit of a few thousand."""
    soft, _ = open_files_limits()
    return None if soft is None else max(1, soft // 2)


def open_files_of(database: Any) -> int:
    """The files ``database`` (a detached RocksDatabase) holds open: its SST files, at most as many as its
    ``max_open_files`` allows, plus :data:`FILES_PER_DATABASE`."""
    live_sst_files = getattr(database, "live_sst_files", None)
    try:
        sst_files = len(live_sst_files()) if live_sst_files is not None else 0
    except Exception:  # a database that cannot list its files is estimated without them
        sst_files = 0
    settings = getattr(database, "settings", None)
    max_open = getattr(settings, "max_open_files", -1)
    if max_open is not None and max_open > 0:
        sst_files = min(sst_files, max_open)
    return sst_files + FILES_PER_DATABASE


def worker_reuse_enabled() -> bool:
    """Whether Spark reuses this Python worker for later tasks (the JVM sets ``SPARK_REUSE_WORKER`` then). Without
    reuse the worker exits after its task, and a database kept open would be lost with it."""
    return bool(os.environ.get("SPARK_REUSE_WORKER"))


def abandon(local: LocalDatabases, path: str, database: Any) -> None:
    """Close a database whose ``path`` this process no longer owns (:meth:`LocalDatabases.owns`) without writing
    into it: its handle goes first, so the flush and the obsolete-file purge of RocksDB's close find no directory
    (closed at ``path`` they would write SSTs under file names the new owner uses, and delete its files)."""
    logger.warning("the local state database %s was deleted while this process held it; closing it without "
                   "writing into the directory (another process may own it now)", path)
    local.drop_handle(database.path)
    try:
        database.close()
    except Exception:  # expected: nothing can be flushed without a directory
        pass


_SHARED: dict[str, "OpenDatabases"] = {}


def open_databases_of(local: LocalDatabases) -> "OpenDatabases":
    """The one :class:`OpenDatabases` of this process for ``local``'s directory: every store (query) of a worker
    process shares it, as they share the request channel ``workers/<pid>.fifo``."""
    shared = _SHARED.get(local.root)
    if shared is None:
        shared = _SHARED[local.root] = OpenDatabases(local)
    return shared


@dataclass
class KeptDatabase:
    database: Any  # a detached RocksDatabase, open and recording
    tag: str  # the committed version it holds
    lock: int  # the descriptor holding its flock
    last_used: float
    families: int = 1
    moves_with: Any = None  # databases with equal values move between workers together (one Spark partition's)
    files: int = FILES_PER_DATABASE  # the files it holds open (open_files_of)


class OpenDatabases:
    """The databases this process keeps open below one local directory, and the thread that gives them up."""

    def __init__(self, local: LocalDatabases, keep_seconds: float = KEEP_OPEN_SECONDS,
                 max_kept: int = MAX_KEPT_DATABASES, max_open_files: Optional[int] = None) -> None:
        """``max_open_files``: how many files the kept databases may hold open together (default
        :func:`open_files_budget`; no bound without a limit of open files)."""
        self.local = local
        self.keep_seconds = keep_seconds
        self.max_kept = max_kept
        self.max_families = max_kept * 8
        self.max_open_files = open_files_budget() if max_open_files is None else max_open_files
        self._warned_open_files = False
        self._kept: dict[str, KeptDatabase] = {}
        self._in_use: Optional[str] = None
        self._release_after_use = False
        self._mutex = threading.Lock()
        self._listener: Optional[threading.Thread] = None
        self._listener_failed = False
        self._pid = os.getpid()

    def take_first(self, paths: list[str]) -> tuple[Optional[str], Optional[KeptDatabase]]:
        """The first of ``paths`` (one key group's copies) whose database this process keeps, and that database (no
        longer kept: the caller uses it, and owns its lock); (None, None) when it keeps none of them, and then
        :meth:`use` names the path the call locks instead. From now until :meth:`done` a request to close the path
        in use is deferred to the end of the call."""
        with self._mutex:
            self._release_after_use = False
            for path in paths:
                kept = self._kept.pop(path, None)
                if kept is not None:
                    self._in_use = path
                    return path, kept
            self._in_use = None
            return None, None

    def use(self, path: str) -> None:
        """The call uses the database at ``path``, which it locked itself: as after :meth:`take_first`."""
        with self._mutex:
            self._in_use = path
            self._release_after_use = False

    def done(self) -> None:
        """The call on the database taken or opened since :meth:`take_first` ended without keeping it."""
        with self._mutex:
            self._in_use = None

    def limit_families(self, memtable_budget_bytes: int, arena_block_bytes: int) -> None:
        """Keep no more column families open than half of ``memtable_budget_bytes`` has arena blocks: every open
        memtable reserves one, and a budget used up by reservations flushes on every write."""
        self.max_families = max(1, min(self.max_families, memtable_budget_bytes // (2 * arena_block_bytes)))

    def keep(self, path: str, database: Any, tag: str, lock: int, moves_with: Any = None) -> bool:
        """End the call on ``path`` keeping ``database`` (detached, at committed version ``tag``) open and locked
        for a later call; False (nothing kept: the caller closes it) when another process asked for it meanwhile.
        One step, so a request can never fall between the end of the call and the keeping.

        ``moves_with``: when another process asks for one database, the kept databases with the same value (not
        None) below the same directory are closed right after it: Spark runs a partition's key groups in one task,
        so the asker will want them next, and finds them closed instead of waiting for each in turn."""
        if not self._start_listener():
            return False
        files = open_files_of(database) if self.max_open_files is not None else FILES_PER_DATABASE
        # The budget is the process's: another local directory's kept databases (another query's state_local_dir)
        # hold files of the same limit. Counted before taking this mutex, so no two mutexes are ever held at once.
        files_elsewhere = 0 if self.max_open_files is None else sum(
            other.files_kept() for other in list(_SHARED.values()) if other is not self)
        with self._mutex:
            wanted_elsewhere = self._release_after_use and self._in_use == path
            self._in_use = None
            if wanted_elsewhere:
                return False
            families = len(getattr(database, "column_families", ())) or 1
            self._kept[path] = KeptDatabase(database, tag, lock, time.monotonic(), families, moves_with, files)
            evicted = []
            total = sum(kept.families for kept in self._kept.values())
            open_files = files_elsewhere + sum(kept.files for kept in self._kept.values())
            max_open_files = self.max_open_files
            files_bound = max_open_files is not None and open_files > max_open_files

            def over() -> bool:  # one database alone stays kept whatever its files: it never takes a second
                return (len(self._kept) > self.max_kept or total > self.max_families
                        or (max_open_files is not None and open_files > max_open_files and len(self._kept) > 1))

            if over():
                for oldest in sorted(self._kept, key=lambda p: self._kept[p].last_used):
                    if not over():
                        break
                    evicted.append((oldest, self._kept.pop(oldest)))
                    total -= evicted[-1][1].families
                    open_files -= evicted[-1][1].files
            if files_bound and not self._warned_open_files:
                self._warned_open_files = True
                logger.warning(
                    "keeping %d local state databases open between calls, not every key group this worker runs: "
                    "their files would pass %d, half this process's limit of open files; the others are opened "
                    "for each call, which is slower. Raise the limit (ulimit -n, LimitNOFILE, or the container's "
                    "nofile limit) for faster calls", len(self._kept), max_open_files)
        for evicted_path, kept in evicted:
            self._close(evicted_path, kept)
        return True

    def files_kept(self) -> int:
        """The files the databases kept here hold open (see :func:`open_files_of`)."""
        with self._mutex:
            return sum(kept.files for kept in self._kept.values())

    def close_all(self) -> None:
        with self._mutex:
            kept, self._kept = self._kept, {}
        for path, entry in kept.items():
            self._close(path, entry)

    def __len__(self) -> int:
        return len(self._kept)

    def _close(self, path: str, kept: KeptDatabase) -> None:
        """Flush, close and tag a kept database, then release its lock (in this order: the next holder reads the
        tag to decide whether to trust the files). A database whose directory was deleted and recreated under it
        (its lock file is another one now) is abandoned instead: the path may belong to another process."""
        if not self.local.owns(path, kept.lock):
            abandon(self.local, path, kept.database)
            self.local.release(kept.lock)
            return
        try:
            kept.database.close()
            if kept.tag == EMPTY_TAG:  # no version to tag: as a call that stores nothing and closes leaves it
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.isdir(path):
                self.local.write_tag(path, kept.tag)
        except Exception:  # a damaged or removed directory: without a tag the next call rebuilds it
            logger.warning("closing the kept local state database %s failed; it will be rebuilt from storage",
                           path, exc_info=True)
            self.local.remove_tag(path)
        finally:
            self.local.drop_handle(kept.database.path)
            self.local.release(kept.lock)

    def release_requested(self, path: str) -> None:
        """Another process waits for ``path``: close it now (and those that move with it), or after the call that
        uses it."""
        with self._mutex:
            kept = self._kept.pop(path, None)
            if kept is None:
                if self._in_use == path:
                    self._release_after_use = True
                return
            directory = os.path.dirname(path)
            # in the order of the calls that used them: the order in which Spark runs the partition's key groups
            siblings = sorted((p for p, other in self._kept.items() if kept.moves_with is not None
                               and other.moves_with == kept.moves_with and os.path.dirname(p) == directory),
                              key=lambda p: self._kept[p].last_used)
            closing = [(path, kept)] + [(p, self._kept.pop(p)) for p in siblings]
        logger.debug("handing %d local state databases (asked for %s) to another worker process", len(closing), path)
        for closing_path, closing_kept in closing:
            self._close(closing_path, closing_kept)

    def close_unused(self, now: Optional[float] = None) -> int:
        """Close the databases unused for ``keep_seconds``; returns how many."""
        now = time.monotonic() if now is None else now
        with self._mutex:
            stale = [p for p, kept in self._kept.items() if now - kept.last_used >= self.keep_seconds]
            closing = [(p, self._kept.pop(p)) for p in stale]
        for path, kept in closing:
            self._close(path, kept)
        return len(closing)

    def _start_listener(self) -> bool:
        """Whether the listener runs (started now if needed); without it nothing may be kept, since no other
        process could ask for a database."""
        if self._listener is not None and self._pid == os.getpid():
            return True
        if self._listener_failed:
            return False
        self._pid = os.getpid()
        channel = self.local.request_channel(self._pid)
        try:
            os.makedirs(os.path.dirname(channel), exist_ok=True)
            for stale in glob.glob(os.path.join(os.path.dirname(channel), "*.fifo")):
                pid = os.path.basename(stale)[: -len(".fifo")]
                if pid.isdigit() and (int(pid) == self._pid or not process_alive(int(pid))):
                    try:
                        os.remove(stale)
                    except OSError:
                        pass
            os.mkfifo(channel, 0o600)
            # read-write: the FIFO always has a writer (us), so reads block instead of seeing end-of-file
            descriptor = os.open(channel, os.O_RDWR | os.O_NONBLOCK)
        except OSError:
            self._listener_failed = True
            logger.warning("cannot create %s (a FIFO) to take requests for kept databases; this worker closes "
                           "every local state database after its call instead", channel, exc_info=True)
            return False
        self._listener = threading.Thread(target=self._listen, args=(descriptor,),
                                          name="keyedstate-open-databases", daemon=True)
        self._listener.start()
        return True

    def _listen(self, descriptor: int) -> None:
        pending = b""
        # poll, not select: a worker keeping many databases holds over a thousand descriptors (every SST file stays
        # open), so the channel's number may be past select's limit (FD_SETSIZE, 1024) when it is opened
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        while True:
            try:
                ready = poller.poll(1000)
                if ready:
                    pending += os.read(descriptor, 65536)
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line:
                            self.release_requested(os.fsdecode(line))
                self.close_unused()
            except Exception:  # never let the thread die: other workers would wait for their lock timeout
                logger.warning("the thread that gives up kept local state databases failed; retrying", exc_info=True)
                time.sleep(1.0)
