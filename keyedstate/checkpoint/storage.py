"""Durable state storage over ``pyarrow.fs``: a local directory or any URI pyarrow understands (s3://, gs://,
hdfs://).

It stores and verifies files for RocksDB mode's key-group versions (:mod:`keyedstate.state.rocksdb.versions`, which
defines the layout under the root): every write returns a :class:`~keyedstate.checkpoint.manifest.FileEntry` with
size and sha256, and every read checks them, so a damaged or missing file fails with an error naming it. Transient
failures of the store are retried (``retry_seconds``).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import time
import uuid
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, TypeVar

import pyarrow.fs as pafs

from keyedstate.checkpoint.filesystems import StorageOptions, has_directories, is_transient, open_filesystem
from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.errors import (
    ConfigurationError,
    NoSpaceLeftError,
    SnapshotCorruptedError,
    SnapshotError,
    StorageUnavailableError,
)
from keyedstate.redaction import redact_uri

__all__ = ["CheckpointStorage", "Where"]

logger = logging.getLogger("keyedstate.checkpoint")

_CHUNK = 4 * 1024 * 1024
_SCOPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_FIRST_RETRY_DELAY = 0.2
_MAX_RETRY_DELAY = 5.0
PROBE_PREFIX = "_keyedstate-write-probe-"
_T = TypeVar("_T")


class Where(Protocol):
    """What a verified file belongs to, for error messages (a key group's base snapshot or changelog)."""

    def describe(self) -> str: ...


class CheckpointStorage:
    """Where RocksDB mode's durable state files live.

    ``options`` (:class:`~keyedstate.checkpoint.filesystems.StorageOptions` or its dict form): credentials and
    endpoint of ``s3://`` locations and ``retry_seconds``, how long an operation is retried while the store is
    unreachable (exponential backoff); after that it fails with :class:`SnapshotError` naming the location."""

    def __init__(self, location: str | os.PathLike[str], *, filesystem: Optional[pafs.FileSystem] = None,
                 options: Optional[Mapping[str, Any] | StorageOptions] = None, create: bool = True) -> None:
        """``create=False``: leave a missing root missing (tools that only read or delete, such as the clean-up,
        must not create a directory a mistyped location names)."""
        self.options = StorageOptions.parse(options)
        location = os.fspath(location)
        if filesystem is not None:
            self.filesystem, self.root = filesystem, location.rstrip("/")
        else:
            try:
                self.filesystem, self.root = open_filesystem(location, self.options)
            except ConfigurationError:
                raise
            except Exception as error:  # pyarrow raises ArrowInvalid/OSError for unknown schemes and bad URIs
                raise ConfigurationError(
                    f"checkpoint location {redact_uri(location)!r} is not usable: {error}") from error
        self.location = location
        self._directories = has_directories(self.filesystem)
        if create:
            self._io(lambda: self.filesystem.create_dir(self.root, recursive=True), "create the storage root")

    def __repr__(self) -> str:
        return f"CheckpointStorage({self.location!r})"

    @staticmethod
    def check_scope(scope: str) -> str:
        """``scope`` if it can name one directory of the storage (an operator's ``uid``), else ConfigurationError."""
        if not isinstance(scope, str) or not _SCOPE.match(scope):
            raise ConfigurationError(
                f"a storage scope must match {_SCOPE.pattern} (it names a directory), got {scope!r}")
        return scope

    def _full(self, relative: str) -> str:
        return f"{self.root}/{relative}" if relative else self.root

    def _io(self, action: Callable[[], _T], what: str) -> _T:
        try:
            return self._retrying(action, what)
        except FileNotFoundError:
            raise
        except OSError as error:  # pyarrow raises OSError subclasses for every filesystem failure
            raise self._failed(what, error) from error

    def _reading(self, action: Callable[[], _T], what: str, missing: Callable[[OSError], SnapshotError],
                 local_path: Optional[str] = None) -> _T:
        """Like :meth:`_io`, but a file that is absent or unreadable (not: a store that is unreachable) raises
        ``missing(error)``, so a restore can tell a damaged snapshot from an outage. A download into the full disk
        of ``local_path`` is neither: it raises :class:`NoSpaceLeftError` naming that disk."""
        try:
            return self._retrying(action, what)
        except OSError as error:
            if local_path is not None and _is_no_space(error):
                raise _no_space(what, os.path.dirname(local_path) or ".", error,
                                "or move state_local_dir to a disk with room") from error
            raise (self._failed(what, error) if is_transient(error) else missing(error)) from error

    def _failed(self, what: str, error: OSError) -> SnapshotError:
        if _is_no_space(error):
            return _no_space(f"{what} in {self.location}", self.location, error,
                             "or move state_storage to a storage with room")
        if not is_transient(error):
            return SnapshotError(f"checkpoint storage {self.location}: cannot {what}: {error}")
        return StorageUnavailableError(
            f"checkpoint storage {self.location}: cannot {what}: {error} (still failing after retrying for "
            f"{self.options.retry_seconds:g} s; raise state_storage_options['retry_seconds'] to ride out longer "
            f"outages)")

    def _retrying(self, action: Callable[[], _T], what: str) -> _T:
        """``action()``, again after transient failures until ``options.retry_seconds`` have passed."""
        deadline = time.monotonic() + self.options.retry_seconds
        delay = _FIRST_RETRY_DELAY
        failures = 0
        while True:
            try:
                result = action()
            except OSError as error:
                if not is_transient(error) or time.monotonic() + delay > deadline:
                    raise
                failures += 1
                if failures == 1:
                    logger.warning("checkpoint storage %s: cannot %s (%s); retrying for up to %g s",
                                   self.location, what, error, self.options.retry_seconds)
                time.sleep(delay)
                delay = min(delay * 2, _MAX_RETRY_DELAY)
                continue
            if failures:
                logger.warning("checkpoint storage %s: %s succeeded after %d retries", self.location, what, failures)
            return result

    def _create_parent(self, relative: str) -> None:
        if self._directories and "/" in relative:  # object stores have none: creating them only costs requests
            self.filesystem.create_dir(self._full(relative.rsplit("/", 1)[0]), recursive=True)

    def write_bytes(self, relative: str, data: bytes, name: str, shared: bool = False) -> FileEntry:
        def write() -> None:
            self._create_parent(relative)
            with self.filesystem.open_output_stream(self._full(relative)) as out:
                out.write(data)

        self._io(write, f"write {relative}")
        return FileEntry(relative, name, len(data), hashlib.sha256(data).hexdigest(), shared)

    def replace_bytes(self, relative: str, data: bytes) -> None:
        """Write ``relative`` so that a concurrent reader sees the old or the new content, never part of it: a PUT
        where the store has no directories (object stores), else a temporary file moved over it."""
        if not self._directories:
            self.write_bytes(relative, data, relative)
            return
        temporary = f"{relative}.{uuid.uuid4().hex}.tmp"

        def write() -> None:
            self._create_parent(relative)
            with self.filesystem.open_output_stream(self._full(temporary)) as out:
                out.write(data)
            self.filesystem.move(self._full(temporary), self._full(relative))

        self._io(write, f"write {relative}")

    def upload_file(self, local_path: str, relative: str, name: str, shared: bool = False,
                    checksum: Optional[str] = None) -> FileEntry:
        """Copy a local file to ``relative``, hashing it on the way (``checksum`` skips nothing: it is verified)."""
        def upload() -> tuple[int, str]:
            self._create_parent(relative)
            with open(local_path, "rb") as source, self.filesystem.open_output_stream(self._full(relative)) as out:
                return _copy_hashing(source, out)

        size, digest = self._io(upload, f"upload {local_path} to {relative}")
        entry = FileEntry(relative, name, size, digest, shared)
        if checksum is not None and checksum != entry.checksum:
            raise SnapshotError(f"{local_path} changed while it was uploaded to {relative}")
        return entry

    def read_verified(self, entry: FileEntry, where: Where) -> bytes:
        """The file's bytes after checking size and checksum; SnapshotCorruptedError names the file otherwise."""
        data = self._reading(lambda: self._read_all(entry.path), f"read {entry.path}",
                             lambda error: self._missing(entry, where, error))
        self._check(entry, where, len(data), hashlib.sha256(data).hexdigest())
        return data

    def _read_all(self, relative: str) -> bytes:
        with self.filesystem.open_input_stream(self._full(relative)) as source:
            return source.read()

    def download_verified(self, entry: FileEntry, where: Where, local_path: str) -> None:
        def download() -> tuple[int, str]:
            with self.filesystem.open_input_stream(self._full(entry.path)) as source, open(local_path, "wb") as out:
                return _copy_hashing(source, out)

        size, digest = self._reading(download, f"download {entry.path}",
                                     lambda error: self._missing(entry, where, error), local_path=local_path)
        self._check(entry, where, size, digest)

    def _missing(self, entry: FileEntry, where: Where, error: Exception) -> SnapshotCorruptedError:
        return SnapshotCorruptedError(
            f"file {entry.path} of {where.describe()} is missing or unreadable in {self.location}: {error}"
        )

    def _check(self, entry: FileEntry, where: Where, size: int, checksum: str) -> None:
        if size != entry.size or checksum != entry.checksum:
            raise SnapshotCorruptedError(
                f"file {entry.path} of {where.describe()} is corrupt: expected {entry.size} bytes with sha256 "
                f"{entry.checksum[:16]}..., found {size} bytes with sha256 {checksum[:16]}..."
            )

    def _info(self, relative: str) -> pafs.FileInfo:
        return self._io(lambda: self.filesystem.get_file_info(self._full(relative)), f"look for {relative}")

    def _list(self, directory: str, recursive: bool = False) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(directory, recursive=recursive, allow_not_found=True)

        def list_or_nothing() -> list[pafs.FileInfo]:
            try:
                return self.filesystem.get_file_info(selector)
            except FileNotFoundError:
                # pyarrow's local file system lists first and checks whether the directory exists only when that
                # failed: a directory another process creates in between is reported as not found despite
                # allow_not_found. It did not exist when it was listed, so it had no entries.
                return []

        return self._io(list_or_nothing, f"list {directory}")

    def list_files(self, relative_dir: str = "") -> list[str]:
        """Every file below ``relative_dir`` (relative paths), for tests and tooling."""
        infos = self._list(self._full(relative_dir), recursive=True)
        return sorted(info.path[len(self.root) + 1:] for info in infos if info.type == pafs.FileType.File)

    def _delete(self, relative: str, deleted: list[str], directory: bool = False) -> None:
        """Delete a file, or an emptied directory (on object stores: its marker object, if pyarrow left one); one
        already gone is no failure, and a failure is logged, not raised."""
        try:
            (self.filesystem.delete_dir if directory else self.filesystem.delete_file)(self._full(relative))
            if not directory:
                deleted.append(relative)
        except FileNotFoundError:
            pass
        except OSError as error:
            logger.warning("could not delete %s: %s", relative, error)

    def check_writable(self) -> None:
        """Write and delete a small probe file at the root; ConfigurationError naming the location and the fix when
        either fails (a read-only mount, credentials that may only read, a missing bucket).

        The probe's name is unique to the call, so queries checking one storage at the same time never touch each
        other's probe, and it is never read back, so an object store's listing lag cannot make it fail."""
        name = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        try:
            self.write_bytes(name, b"keyedstate write probe", name)
            self._io(lambda: self.filesystem.delete_file(self._full(name)), f"delete {name}")
        except SnapshotError as error:
            raise ConfigurationError(
                f"state storage {self.location} is not writable: {error}. RocksDB mode writes and deletes its state "
                f"files there: make it writable (mount it read-write, give the credentials write and delete "
                f"permission, create the bucket), or pass another state_storage") from error

    def read_bytes(self, relative: str) -> bytes:
        """A whole file; SnapshotCorruptedError names it when it is missing or unreadable."""
        return self._reading(lambda: self._read_all(relative), f"read {relative}", lambda error: SnapshotCorruptedError(
            f"{relative} in {self.location} is missing or unreadable: {error}"))

    def list_entries(self, relative_dir: str) -> list[tuple[str, bool, Optional[float]]]:
        """``(name, is directory, modification time in epoch seconds or None)`` of the direct children."""
        infos = self._list(self._full(relative_dir))
        return [(info.base_name, info.type == pafs.FileType.Directory,
                 info.mtime.timestamp() if info.mtime is not None else None) for info in infos]

    def list_names(self, relative_dir: str) -> list[str]:
        """The names of the direct children: :meth:`list_entries` without the type and time, which cost a Python
        object each (the garbage collection of every key group lists its directory)."""
        return [info.base_name for info in self._list(self._full(relative_dir))]

    def exists(self, relative: str = "") -> bool:
        """Whether a file or directory is at ``relative`` ("": the root)."""
        return self._info(relative).type != pafs.FileType.NotFound

    def sizes(self, relative_dir: str = "") -> tuple[int, int]:
        """(number of files, total bytes) below ``relative_dir``."""
        infos = [info for info in self._list(self._full(relative_dir), recursive=True)
                 if info.type == pafs.FileType.File]
        return len(infos), sum(info.size or 0 for info in infos)

    def delete_tree(self, relative: str) -> list[str]:
        """Delete a file or a directory with everything below it ("": the root itself); returns the deleted paths
        (missing: none)."""
        info = self._info(relative)
        deleted: list[str] = []
        if info.type == pafs.FileType.Directory:
            for path in self.list_files(relative):
                self._delete(path, deleted)
            self._delete(relative, deleted, directory=True)
        elif info.type == pafs.FileType.File:
            self._delete(relative, deleted)
        return deleted

    def delete_files(self, paths: Iterable[str]) -> None:
        deleted: list[str] = []
        for path in paths:
            self._delete(path, deleted)


def _copy_hashing(source: Any, out: Any) -> tuple[int, str]:
    """Copy ``source`` to ``out`` in chunks; returns the size and the sha256 (a retry calls it again: it starts
    over)."""
    digest, size = hashlib.sha256(), 0
    while chunk := source.read(_CHUNK):
        digest.update(chunk)
        size += len(chunk)
        out.write(chunk)
    return size, digest.hexdigest()


def _is_no_space(error: OSError) -> bool:
    # pyarrow keeps the errno of local writes; other file systems only say it in the message
    return error.errno == errno.ENOSPC or "[Errno 28]" in str(error) or "No space left on device" in str(error)


def _no_space(what: str, location: str, error: OSError, move: str) -> NoSpaceLeftError:
    return NoSpaceLeftError(f"cannot {what}: no space left on device at {location} ({error}); free space there, "
                            f"{move}")
