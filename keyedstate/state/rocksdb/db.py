"""Opening, locking and closing the RocksDB database of one backend, and its column families.

rocksdict keeps the database open while any column-family handle or iterator is alive, so :class:`RocksDatabase`
hands out handles and forgets them all on :meth:`close`; stores must not cache handles beyond a rebind.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import time
from typing import Any, Iterable, Optional, Sequence

import rocksdict

from keyedstate.errors import KeyedStateError, StateBackendLockedError
from keyedstate.state.rocksdb.changelog import ChangeLog, Operation, RecordingBatch, RecordingFamily
from keyedstate.state.rocksdb.errors import is_lock_error, translate
from keyedstate.state.rocksdb.options import RocksDBOptions

__all__ = ["RocksDatabase", "STATE_CF_PREFIX", "RAW_CF_PREFIX", "OWNER_FILE"]

# Column family names: a prefix per kind, so a state can be called like a raw column (or "default") safely.
STATE_CF_PREFIX = "state:"
RAW_CF_PREFIX = "raw:"
DEFAULT_CF = "default"
OWNER_FILE = "KEYEDSTATE-OWNER.json"
"""Who holds the lock (pid, host, since); RocksDB's LOCK file says nothing, so lock errors quote this file."""


_BUILT_OPTIONS: dict[RocksDBOptions, Any] = {}


def _built(options: RocksDBOptions) -> Any:
    """One rocksdict ``Options`` (and so one block cache) per distinct settings in this process: a process that
    opens database after database (one per Spark key group) shares one bounded cache among them."""
    built = _BUILT_OPTIONS.get(options)
    if built is None:
        built = _BUILT_OPTIONS[options] = options.build()
    return built


def _flush_quietly(families: Iterable[Any]) -> None:
    for family in families:
        try:
            family.flush()  # without a WAL only flushed data survives the close
        except Exception:  # flushing is best effort; close must still release the lock
            pass


class RocksDatabase:
    """An open rocksdict database in raw mode with its column families.

    With ``record_changes`` every write made through :meth:`column_family` objects and :meth:`new_batch` batches
    is also recorded (:meth:`take_changes`; see :mod:`keyedstate.state.rocksdb.changelog`). ``families`` are
    created at open when missing (one open instead of one creation per family). ``collect_on_close`` runs a full
    garbage collection after closing, so handles held in reference cycles release the lock at once; owners that
    unbind every handle themselves skip it (a collection costs tens of ms in a process with a large heap).

    With ``capture_content`` (a database the caller knows to be new, not recording) the entries written through
    :meth:`put_entries` are kept as they are written, so :meth:`contents_as_changes` need not read them back when
    nothing else was written.
    """

    def __init__(self, path: str, options: RocksDBOptions, record_changes: bool = False,
                 families: Iterable[str] = (), collect_on_close: bool = True, capture_content: bool = False) -> None:
        self.path = os.path.abspath(path)
        self.settings = options
        self.options = _built(options)
        self.write_options = rocksdict.WriteOptions()
        # snapshots give durability (Flink's RocksDB backend does the same). rocksdict's stub declares disable_wal a
        # method; the binding has a settable attribute.
        self.write_options.disable_wal = True  # type: ignore[method-assign, assignment]
        self.db: Any = None
        self.column_families: dict[str, Any] = {}
        self.handles: dict[str, Any] = {}
        self._handle_names: dict[int, str] = {}
        self._recorded: Optional[list[Operation]] = [] if record_changes else None
        self._content: Optional[list[tuple[str, Sequence[bytes], Sequence[bytes]]]] = None
        self._wanted_families = set(families)
        self.collect_on_close = collect_on_close
        self.settled_for: Optional[tuple] = None
        """Set by the backend that detaches the database with every state settled (see
        KeyGroupRocksDBBackend.detach_key_group): what that backend had registered then."""
        self._open_with_retry()
        # RocksDB gives every write operation of a database its own sequence number, also a delete of a missing key
        # or a range delete: from a new database's zero, the last one counts every operation written since.
        if capture_content and self._recorded is None and self._last_sequence_number() == 0:
            self._content = []

    @property
    def records_changes(self) -> bool:
        return self._recorded is not None

    def take_changes(self) -> ChangeLog:
        """The writes recorded since the last call (or the open); recording goes on with an empty log."""
        if self._recorded is None:
            raise RuntimeError("this database does not record changes")
        changes = ChangeLog(list(self._recorded))
        self._recorded.clear()  # in place: every recording family appends to this list
        return changes

    def start_recording(self) -> None:
        """Record every write from now on (a database opened empty whose content was just stored whole). Objects
        taken from :attr:`column_families` before do not record: stores bind again to take the recording ones.

        The families it holds are wrapped, not fetched again from rocksdict: rocksdict flushes a column family
        when the object that handed it out is dropped, so re-fetching would write every memtable of the new
        database to SST files at the end of its first call (the data is durable in storage already; memtables are
        flushed when the memtable budget or a base snapshot calls for it, and at close)."""
        self._content = None
        if self._recorded is None:
            recorded = self._recorded = []
            for name, family in list(self.column_families.items()):
                self.column_families[name] = RecordingFamily(family, name, recorded)

    def contents_as_changes(self) -> ChangeLog:
        """Everything the database holds as puts: the changes of a database that was opened empty.

        A database that captures its content (see the class) returns what :meth:`put_entries` wrote when that was
        every operation since the open and each family was written once (so each key is there once); otherwise it
        reads its content back."""
        content = self._content
        if content is not None and self._last_sequence_number() == sum(len(keys) for _, keys, _ in content) \
                and len({name for name, _, _ in content}) == len(content):
            return ChangeLog.of_contents(list(content))
        # keys and values read apart: two scans of the memtables cost less than a (key, value) tuple per entry
        return ChangeLog.of_contents([(name, list(family.keys()), list(family.values()))
                                      for name, family in self.column_families.items()])

    def _open_with_retry(self) -> None:
        os.makedirs(self.path, exist_ok=True)
        deadline = time.monotonic() + self.settings.lock_timeout_seconds
        while True:
            try:
                self._open()
                break
            except Exception as error:  # rocksdict raises plain Exception; classified in errors.py
                if not is_lock_error(error):
                    raise translate(error, "open the state database", self.path) from error
                if time.monotonic() >= deadline:
                    raise StateBackendLockedError(
                        f"the RocksDB state database at {self.path} is still locked after waiting "
                        f"{self.settings.lock_timeout_seconds:g} s{_holder_hint(self.path)}. Another backend (in "
                        f"this or another process) has it open: close that backend or stop that process, or give "
                        f"this backend its own path"
                    ) from error
                gc.collect()  # a dropped backend of this process may still hold the lock through a stray handle
                time.sleep(self.settings.lock_retry_interval_seconds)
        self._write_owner_file()
        if not self.settings.reuse_existing:
            for name in list(self.column_families):
                if name != DEFAULT_CF:
                    self.drop_column_family(name)
            default = self.column_families[DEFAULT_CF]
            for key in list(self.db.keys()):
                default.delete(key)

    def _open(self) -> None:
        existing = [DEFAULT_CF]
        if os.path.exists(os.path.join(self.path, "CURRENT")):
            existing = rocksdict.Rdict.list_cf(self.path, self.options)
        families = {name: self.options for name in [*existing, *self._wanted_families] if name != DEFAULT_CF}
        self.db = rocksdict.Rdict(self.path, self.options, column_families=families)
        self.db.set_write_options(self.write_options)
        self.column_families = {}
        self.handles = {}
        self._handle_names = {}
        self._bind(DEFAULT_CF)
        for name in families:
            self._bind(name)

    def _bind(self, name: str) -> Any:
        if name == DEFAULT_CF:
            family = self.db
        else:
            family = self.db.get_column_family(name)
            family.set_write_options(self.write_options)
        handle = self.handles[name] = self.db.get_column_family_handle(name)
        self._handle_names[id(handle)] = name
        if self._recorded is not None:
            family = RecordingFamily(family, name, self._recorded)
        self.column_families[name] = family
        return family

    def _write_owner_file(self) -> None:
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "since_ms": time.time_ns() // 1_000_000}
        try:
            with open(os.path.join(self.path, OWNER_FILE), "w", encoding="utf-8") as file:
                json.dump(owner, file)
        except OSError:  # only a hint for error messages; never worth failing the open
            pass

    def close(self) -> None:
        if self.db is None:
            return
        _flush_quietly(self.column_families.values())
        failure: Optional[KeyedStateError] = None
        try:
            self.db.close()  # a failure's traceback must not reach a family handle: it would keep the lock
        except Exception as error:  # rocksdict's plain Exception: a full disk fails the close's flush
            failure = translate(error, "close the state database", self.path)
        finally:
            self.db = None
            self._content = None
            self.column_families = {}
            self.handles = {}
            self._handle_names = {}
            try:
                os.remove(os.path.join(self.path, OWNER_FILE))
            except OSError:
                pass
            if self.collect_on_close:
                gc.collect()  # drop handles held by reference cycles so the LOCK is released now
        if failure is not None:
            raise failure  # outside the except block: no traceback of the failed close is kept

    @property
    def is_open(self) -> bool:
        return self.db is not None

    def column_family(self, name: str) -> Any:
        family = self.column_families.get(name)
        if family is None:
            try:
                self.db.create_column_family(name, self.options)
                family = self._bind(name)
            except Exception as error:
                raise translate(error, f"create column family {name!r}", self.path) from error
        return family

    def drop_column_family(self, name: str) -> None:
        self._content = None  # the entries it captured may be gone; dropping a family takes no sequence number
        self.column_families.pop(name, None)
        handle = self.handles.pop(name, None)
        self._handle_names.pop(id(handle), None)
        try:
            self.db.drop_column_family(name)
        except Exception as error:
            raise translate(error, f"drop column family {name!r}", self.path) from error

    def family_names(self, prefix: str) -> list[str]:
        return sorted(name for name in self.column_families if name.startswith(prefix))

    def write(self, batch: Any) -> None:
        recording = isinstance(batch, RecordingBatch)
        try:
            self.db.write(batch.batch if recording else batch, self.write_options)
        except Exception as error:
            raise translate(error, "write a batch", self.path) from error
        if recording and self._recorded is not None:
            self._recorded.extend(batch.ops)

    def _last_sequence_number(self) -> int:
        return int(self.db.latest_sequence_number())

    def put_entries(self, name: str, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        """Put ``keys[i]`` to ``values[i]`` in column family ``name``, in one batch (recorded like any batch)."""
        handle = self.handles[name]
        batch = self.new_batch()
        put = batch.put
        for key, value in zip(keys, values):
            put(key, value, handle)
        self.write(batch)
        if self._content is not None:
            self._content.append((name, keys, values))

    def new_batch(self, record: bool = True) -> Any:
        batch = rocksdict.WriteBatch(raw_mode=True)
        if record and self._recorded is not None:
            return RecordingBatch(batch, self._handle_names)
        return batch

    def is_empty(self) -> bool:
        """Whether no state or raw column family holds a key (one seek each; the default family's metadata does not
        count)."""
        for name, family in self.column_families.items():
            if name == DEFAULT_CF:
                continue
            iterator = family.iter()
            iterator.seek_to_first()
            if iterator.valid():
                return False
        return True

    def live_sst_files(self) -> dict[str, int]:
        """The SST files the database reads now, path to size (without what the memtables hold). A compaction
        running meanwhile may delete one before the caller reads it."""
        try:
            files = self.db.live_files()
        except Exception as error:
            raise translate(error, "list the live SST files of the state database", self.path) from error
        return {os.path.join(self.path, str(file["name"]).lstrip("/")): int(file["size"]) for file in files}

    def checkpoint(self, target: str) -> None:
        """A consistent copy of the database in ``target`` (hard links for SST files).

        RocksDB flushes every memtable first (rocksdict passes log_size_for_flush=0), so unlogged writes are in it.
        """
        try:
            rocksdict.Checkpoint(self.db).create_checkpoint(target)
        except Exception as error:
            raise translate(error, f"create a RocksDB checkpoint in {target}", self.path) from error


def _holder_hint(path: str) -> str:
    try:
        with open(os.path.join(path, OWNER_FILE), encoding="utf-8") as file:
            owner = json.load(file)
        return f" (held by pid {owner.get('pid')} on host {owner.get('host')} since epoch ms {owner.get('since_ms')})"
    except (OSError, ValueError):
        return " (holder unknown: no owner file)"
