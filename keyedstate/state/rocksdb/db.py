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
from typing import Any, Optional

import rocksdict

from keyedstate.errors import StateBackendLockedError
from keyedstate.state.rocksdb.errors import is_lock_error, translate
from keyedstate.state.rocksdb.options import RocksDBOptions

__all__ = ["RocksDatabase", "STATE_CF_PREFIX", "RAW_CF_PREFIX", "OWNER_FILE"]

# Column family names: a prefix per kind, so a state can be called like a raw column (or "default") safely.
STATE_CF_PREFIX = "state:"
RAW_CF_PREFIX = "raw:"
DEFAULT_CF = "default"
OWNER_FILE = "KEYEDSTATE-OWNER.json"
"""Who holds the lock (pid, host, since); RocksDB's LOCK file says nothing, so lock errors quote this file."""


class RocksDatabase:
    """An open rocksdict database in raw mode with its column families."""

    def __init__(self, path: str, options: RocksDBOptions) -> None:
        self.path = os.path.abspath(path)
        self.settings = options
        self.options = options.build()
        self.write_options = rocksdict.WriteOptions()
        self.write_options.disable_wal = True  # snapshots give durability (Flink's RocksDB backend does the same)
        self.db: Any = None
        self.column_families: dict[str, Any] = {}
        self.handles: dict[str, Any] = {}
        self._open_with_retry()

    # ---- open / close ----------------------------------------------------------------------------------------------

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
            self._clear_default()

    def _open(self) -> None:
        existing = [DEFAULT_CF]
        if os.path.exists(os.path.join(self.path, "CURRENT")):
            existing = rocksdict.Rdict.list_cf(self.path, self.options)
        families = {name: self.options for name in existing if name != DEFAULT_CF}
        self.db = rocksdict.Rdict(self.path, self.options, column_families=families)
        self.db.set_write_options(self.write_options)
        self.column_families = {DEFAULT_CF: self.db}
        self.handles = {}
        for name in families:
            self._bind(name)

    def _bind(self, name: str) -> Any:
        family = self.db.get_column_family(name)
        family.set_write_options(self.write_options)
        self.column_families[name] = family
        self.handles[name] = self.db.get_column_family_handle(name)
        return family

    def _clear_default(self) -> None:
        keys = list(self.db.keys())
        for key in keys:
            self.db.delete(key)

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
        for family in self.column_families.values():
            try:
                family.flush()  # without a WAL only flushed data survives the close
            except Exception:  # flushing is best effort; close must still release the lock
                pass
        try:
            self.db.close()
        finally:
            self.db = None
            self.column_families = {}
            self.handles = {}
            try:
                os.remove(os.path.join(self.path, OWNER_FILE))
            except OSError:
                pass
            gc.collect()  # drop handles held by reference cycles so the LOCK is released now

    @property
    def is_open(self) -> bool:
        return self.db is not None

    # ---- column families ---------------------------------------------------------------------------------------

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
        self.column_families.pop(name, None)
        self.handles.pop(name, None)
        try:
            self.db.drop_column_family(name)
        except Exception as error:
            raise translate(error, f"drop column family {name!r}", self.path) from error

    def family_names(self, prefix: str) -> list[str]:
        return sorted(name for name in self.column_families if name.startswith(prefix))

    def write(self, batch: Any) -> None:
        try:
            self.db.write(batch, self.write_options)
        except Exception as error:
            raise translate(error, "write a batch", self.path) from error

    def new_batch(self) -> Any:
        return rocksdict.WriteBatch(raw_mode=True)

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


def open_read_only(path: str) -> Optional[Any]:
    """Open a checkpoint directory read-only with all its column families (for restores)."""
    options = rocksdict.Options(raw_mode=True)
    try:
        names = rocksdict.Rdict.list_cf(path, options)
        families = {name: rocksdict.Options(raw_mode=True) for name in names if name != DEFAULT_CF}
        return rocksdict.Rdict(path, options, column_families=families, access_type=rocksdict.AccessType.read_only(False))
    except Exception as error:
        raise translate(error, "open a staged RocksDB snapshot", path) from error
