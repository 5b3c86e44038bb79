"""An executor-local copy of the changelogs written on this machine, so that a copy of a key group's database that
catches up with changelogs another worker process wrote reads them from local disk, not from state storage (one
request per missed changelog on S3).

Layout, next to the key group's databases (:mod:`keyedstate.spark.local_databases`)::

    <query id>/<uid>/kg-00007.changelogs/c<batch>-<tag>.log   the bytes stored under that name in state storage

Nothing read here is trusted: a cached file is used only when its size and sha256 are the ones the version record
names (the check a read from storage makes); a file that differs is deleted and the changelog read from storage.
Files appear by rename, so a reader in another process finds a whole file or none. Writing is best effort: a full
or failing local disk costs a read from storage later, never the call. The cache of a key group is cleared when it
writes a new base (the chain starts over: only the changelogs its bridge names stay, see
:mod:`keyedstate.state.rocksdb.version_record`) and when the sweep of unused
local databases removes the key group's last copy.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from typing import Optional

from keyedstate.checkpoint.manifest import FileEntry

__all__ = ["LocalChangelogs", "CHANGELOGS_SUFFIX"]

logger = logging.getLogger("keyedstate.spark.rocksdb")

CHANGELOGS_SUFFIX = ".changelogs"
"""Appended to a key group's first database path (``kg-00007``) for the directory of its cached changelogs."""


class LocalChangelogs:
    """The cached changelogs of one key group in ``directory``; the changelog cache of
    :class:`~keyedstate.state.rocksdb.versions.KeyGroupVersions`."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def keep(self, name: str, data: bytes) -> None:
        """Keep the bytes just stored in state storage as changelog ``name``."""
        if not _plain_name(name):
            return
        temporary = os.path.join(self.directory, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(temporary, "wb") as file:
                file.write(data)
            os.replace(temporary, os.path.join(self.directory, name))
        except OSError as error:  # a concurrent clear() removed the directory, or the disk is full
            logger.debug("not caching the changelog %s locally: %s", name, error)
            _remove(temporary)

    def read(self, entry: FileEntry) -> Optional[bytes]:
        """The cached bytes of changelog ``entry`` if they are the ones it names (size and sha256), else None (then
        read it from storage); a cached file that differs is deleted."""
        if not _plain_name(entry.name):
            return None
        path = os.path.join(self.directory, entry.name)
        try:
            with open(path, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                data = file.read(entry.size) if size == entry.size else b""  # another size: never read all of it
        except OSError:  # not written on this machine, or cleared meanwhile
            return None
        checksum = hashlib.sha256(data).hexdigest() if size == entry.size else "(not read)"
        if len(data) == entry.size and checksum == entry.checksum:
            return data
        logger.warning("the locally cached changelog %s is corrupt (expected %d bytes with sha256 %s..., found %d "
                       "bytes with sha256 %s...); deleted it, reading the changelog from state storage",
                       path, entry.size, entry.checksum[:16], size, checksum[:16])
        _remove(path)
        return None

    def retain_only(self, names: set[str]) -> None:
        """Forget every cached changelog of the key group but ``names`` (a new base leaves only its bridge needed)."""
        try:
            cached = os.listdir(self.directory)
        except OSError:
            return
        for name in cached:
            if name not in names:
                _remove(os.path.join(self.directory, name))


def _plain_name(name: str) -> bool:
    # names come from version records: never let one lead outside the directory or collide with a temporary file
    return bool(name) and not name.startswith(".") and os.sep not in name and "/" not in name


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
