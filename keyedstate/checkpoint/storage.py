"""Checkpoint storage over ``pyarrow.fs``: a local directory or any URI pyarrow understands (s3://, gs://, hdfs://).

Layout under the root::

    chk-<id>/<scope>/_MANIFEST.json   the snapshot of one partition (written last, atomically)
    chk-<id>/<scope>/...              files only this snapshot uses (RocksDB MANIFEST/OPTIONS/CURRENT, heap records)
    shared/<scope>/<name>-<sha>.sst   immutable RocksDB SST files, referenced by every snapshot that contains them

Only manifests of a scope reference that scope's shared directory, so retention of one scope never needs to read
the manifests of another.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
import uuid
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar

import pyarrow.fs as pafs

from keyedstate.checkpoint.filesystems import StorageOptions, has_directories, is_transient, open_filesystem
from keyedstate.checkpoint.manifest import FileEntry, SnapshotManifest
from keyedstate.errors import ConfigurationError, SnapshotCorruptedError, SnapshotError, StorageUnavailableError

__all__ = ["CheckpointStorage", "MANIFEST_NAME", "DEFAULT_RETAINED_CHECKPOINTS"]

logger = logging.getLogger("keyedstate.checkpoint")

MANIFEST_NAME = "_MANIFEST.json"
DEFAULT_RETAINED_CHECKPOINTS = 3
_CHUNK = 4 * 1024 * 1024
_CHECKPOINT_DIR = re.compile(r"^chk-(\d+)$")
_SCOPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_FIRST_RETRY_DELAY = 0.2
_MAX_RETRY_DELAY = 5.0
_T = TypeVar("_T")


class CheckpointStorage:
    """Where snapshots live. ``retained_checkpoints`` snapshots are kept per scope (default 3).

    ``options`` (:class:`~keyedstate.checkpoint.filesystems.StorageOptions` or its dict form): credentials and
    endpoint of ``s3://`` locations and ``retry_seconds``, how long an operation is retried while the store is
    unreachable (exponential backoff); after that it fails with :class:`SnapshotError` naming the location."""

    def __init__(self, location: str | os.PathLike[str], *, retained_checkpoints: int = DEFAULT_RETAINED_CHECKPOINTS,
                 filesystem: Optional[pafs.FileSystem] = None,
                 options: Optional[Mapping[str, Any] | StorageOptions] = None) -> None:
        if not isinstance(retained_checkpoints, int) or retained_checkpoints < 1:
            raise ConfigurationError(f"retained_checkpoints must be an int >= 1, got {retained_checkpoints!r}")
        self.retained_checkpoints = retained_checkpoints
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
                raise ConfigurationError(f"checkpoint location {location!r} is not usable: {error}") from error
        self.location = location
        self._directories = has_directories(self.filesystem)
        self._io(lambda: self.filesystem.create_dir(self.root, recursive=True), "create the storage root")

    def __repr__(self) -> str:
        return f"CheckpointStorage({self.location!r})"

    # ---- paths ---------------------------------------------------------------------------------------------------

    @staticmethod
    def check_scope(scope: str) -> str:
        if not isinstance(scope, str) or not _SCOPE.match(scope):
            raise ConfigurationError(f"a snapshot scope must match {_SCOPE.pattern} (it names a directory), got {scope!r}")
        return scope

    @staticmethod
    def checkpoint_dir(checkpoint_id: int, scope: str) -> str:
        return f"chk-{int(checkpoint_id)}/{scope}"

    @staticmethod
    def shared_dir(scope: str) -> str:
        return f"shared/{scope}"

    def _full(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def _io(self, action: Callable[[], _T], what: str) -> _T:
        try:
            return self._retrying(action, what)
        except FileNotFoundError:
            raise
        except OSError as error:  # pyarrow raises OSError subclasses for every filesystem failure
            raise self._failed(what, error) from error

    def _reading(self, action: Callable[[], _T], what: str, missing: Callable[[OSError], SnapshotError]) -> _T:
        """Like :meth:`_io`, but a file that is absent or unreadable (not: a store that is unreachable) raises
        ``missing(error)``, so a restore can tell a damaged snapshot from an outage."""
        try:
            return self._retrying(action, what)
        except OSError as error:
            raise (self._failed(what, error) if is_transient(error) else missing(error)) from error

    def _failed(self, what: str, error: OSError) -> SnapshotError:
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

    # ---- writing -------------------------------------------------------------------------------------------------

    def write_bytes(self, relative: str, data: bytes, name: str, shared: bool = False) -> FileEntry:
        def write() -> None:
            self._create_parent(relative)
            with self.filesystem.open_output_stream(self._full(relative)) as out:
                out.write(data)

        self._io(write, f"write {relative}")
        return FileEntry(relative, name, len(data), hashlib.sha256(data).hexdigest(), shared)

    def upload_file(self, local_path: str, relative: str, name: str, shared: bool = False,
                    checksum: Optional[str] = None) -> FileEntry:
        """Copy a local file to ``relative``, hashing it on the way (``checksum`` skips nothing: it is verified)."""
        digest = hashlib.sha256()
        size = 0

        def upload() -> None:
            nonlocal size, digest
            digest, size = hashlib.sha256(), 0  # a retry starts over
            self._create_parent(relative)
            with open(local_path, "rb") as source, self.filesystem.open_output_stream(self._full(relative)) as out:
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)

        self._io(upload, f"upload {local_path} to {relative}")
        entry = FileEntry(relative, name, size, digest.hexdigest(), shared)
        if checksum is not None and checksum != entry.checksum:
            raise SnapshotError(f"{local_path} changed while it was uploaded to {relative}")
        return entry

    def write_manifest(self, manifest: SnapshotManifest) -> str:
        """Write the manifest atomically (temp file, then rename), so readers never see half of one."""
        self.check_scope(manifest.scope)
        directory = self.checkpoint_dir(manifest.checkpoint_id, manifest.scope)
        final = f"{directory}/{MANIFEST_NAME}"
        temp = f"{directory}/.{MANIFEST_NAME}.{uuid.uuid4().hex}.tmp"
        self.write_bytes(temp, manifest.to_bytes(), MANIFEST_NAME)
        self._io(lambda: self.filesystem.move(self._full(temp), self._full(final)), f"publish {final}")
        manifest.storage = self
        return final

    # ---- reading -------------------------------------------------------------------------------------------------

    def read_verified(self, entry: FileEntry, manifest: SnapshotManifest) -> bytes:
        """The file's bytes after checking size and checksum; SnapshotCorruptedError names the file otherwise."""
        data = self._reading(lambda: self._read_all(entry.path), f"read {entry.path}",
                             lambda error: self._missing(entry, manifest, error))
        self._check(entry, manifest, len(data), hashlib.sha256(data).hexdigest())
        return data

    def _read_all(self, relative: str) -> bytes:
        with self.filesystem.open_input_stream(self._full(relative)) as source:
            return source.read()

    def download_verified(self, entry: FileEntry, manifest: SnapshotManifest, local_path: str) -> None:
        digest = hashlib.sha256()
        size = 0

        def download() -> None:
            nonlocal digest, size
            digest, size = hashlib.sha256(), 0  # a retry starts over
            with self.filesystem.open_input_stream(self._full(entry.path)) as source, open(local_path, "wb") as out:
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)

        self._reading(download, f"download {entry.path}", lambda error: self._missing(entry, manifest, error))
        self._check(entry, manifest, size, digest.hexdigest())

    def _missing(self, entry: FileEntry, manifest: SnapshotManifest, error: Exception) -> SnapshotCorruptedError:
        return SnapshotCorruptedError(
            f"file {entry.path} of {manifest.describe()} is missing or unreadable in {self.location}: {error}"
        )

    def _check(self, entry: FileEntry, manifest: SnapshotManifest, size: int, checksum: str) -> None:
        if size != entry.size or checksum != entry.checksum:
            raise SnapshotCorruptedError(
                f"file {entry.path} of {manifest.describe()} is corrupt: expected {entry.size} bytes with sha256 "
                f"{entry.checksum[:16]}..., found {size} bytes with sha256 {checksum[:16]}..."
            )

    def list_checkpoint_ids(self) -> list[int]:
        infos = self._list(self.root)
        return sorted(int(m.group(1)) for info in infos if (m := _CHECKPOINT_DIR.match(info.base_name))
                      and info.type == pafs.FileType.Directory)

    def scopes_of(self, checkpoint_id: int) -> list[str]:
        """Scopes with a (published) manifest for ``checkpoint_id``."""
        scopes = []
        for info in self._list(self._full(f"chk-{int(checkpoint_id)}")):
            if info.type == pafs.FileType.Directory:
                manifest = self._io(lambda: self.filesystem.get_file_info(f"{info.path}/{MANIFEST_NAME}"),
                                    f"look for {info.path}/{MANIFEST_NAME}")
                if manifest.type == pafs.FileType.File:
                    scopes.append(info.base_name)
        return sorted(scopes)

    def load_manifest(self, checkpoint_id: int, scope: str) -> SnapshotManifest:
        relative = f"{self.checkpoint_dir(checkpoint_id, scope)}/{MANIFEST_NAME}"
        data = self._reading(lambda: self._read_all(relative), f"read {relative}", lambda error: SnapshotCorruptedError(
            f"snapshot manifest {relative} in {self.location} is unreadable: {error}"))
        manifest = SnapshotManifest.from_bytes(data, f"{relative} in {self.location}")
        manifest.storage = self
        return manifest

    def load_manifests(self, checkpoint_id: int) -> tuple[list[SnapshotManifest], list[str]]:
        """Every readable manifest of a checkpoint, plus a description of each unreadable one."""
        manifests, problems = [], []
        for scope in self.scopes_of(checkpoint_id):
            try:
                manifests.append(self.load_manifest(checkpoint_id, scope))
            except SnapshotCorruptedError as error:
                problems.append(str(error))
        return manifests, problems

    def checkpoint_ids_of_scope(self, scope: str) -> list[int]:
        return [cid for cid in self.list_checkpoint_ids() if self._is_file(
            f"{self.checkpoint_dir(cid, scope)}/{MANIFEST_NAME}")]

    def _is_file(self, relative: str) -> bool:
        return self._info(relative).type == pafs.FileType.File

    def _info(self, relative: str) -> pafs.FileInfo:
        return self._io(lambda: self.filesystem.get_file_info(self._full(relative)), f"look for {relative}")

    def _list(self, directory: str) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(directory, allow_not_found=True)
        return self._io(lambda: self.filesystem.get_file_info(selector), f"list {directory}")

    def list_files(self, relative_dir: str = "") -> list[str]:
        """Every file below ``relative_dir`` (relative paths), for tests and tooling."""
        base = self._full(relative_dir) if relative_dir else self.root
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        infos = self._io(lambda: self.filesystem.get_file_info(selector), f"list {base}")
        return sorted(info.path[len(self.root) + 1:] for info in infos if info.type == pafs.FileType.File)

    # ---- retention -----------------------------------------------------------------------------------------------

    def retained_manifests(self, scope: str) -> list[SnapshotManifest]:
        """Readable manifests of the newest ``retained_checkpoints`` checkpoints of ``scope`` (the incremental base)."""
        manifests = []
        for checkpoint_id in self.checkpoint_ids_of_scope(scope)[-self.retained_checkpoints:]:
            try:
                manifests.append(self.load_manifest(checkpoint_id, scope))
            except SnapshotCorruptedError as error:
                logger.warning("ignoring an unreadable snapshot manifest: %s", error)
        return manifests

    def apply_retention(self, scope: str) -> list[str]:
        """Keep the newest ``retained_checkpoints`` snapshots of ``scope``; delete older ones and the shared files
        only they used. Returns the deleted file paths. Never deletes a file a retained manifest references."""
        ids = self.checkpoint_ids_of_scope(scope)
        dropped_ids = ids[:-self.retained_checkpoints]
        if not dropped_ids:
            return []
        referenced: set[str] = set()
        for manifest in self.retained_manifests(scope):
            referenced.update(entry.path for entry in manifest.files)
        deleted: list[str] = []
        for checkpoint_id in dropped_ids:
            try:
                candidates = [entry.path for entry in self.load_manifest(checkpoint_id, scope).files]
            except SnapshotCorruptedError:
                candidates = []  # its shared files cannot be known; they stay (harmless, only space)
            directory = self.checkpoint_dir(checkpoint_id, scope)
            # The manifest goes first: from then on the snapshot no longer exists, even if deleting the rest fails.
            self._delete(f"{directory}/{MANIFEST_NAME}", deleted)
            for path in candidates:
                if path not in referenced:
                    self._delete(path, deleted)
            for path in self.list_files(directory):
                self._delete(path, deleted)
            self._remove_dir(directory)
            self._delete_if_empty(f"chk-{int(checkpoint_id)}")
        if deleted:
            logger.info("checkpoint retention for scope %s dropped checkpoints %s (%d files)", scope, dropped_ids,
                        len(deleted))
        return deleted

    def _delete_if_empty(self, relative_dir: str) -> None:
        # Only dropped (old) checkpoint ids get here; no writer adds files to them any more.
        if not self._list(self._full(relative_dir)):
            self._remove_dir(relative_dir)

    def _remove_dir(self, relative: str) -> None:
        """Remove an emptied directory (on object stores: its marker object, if pyarrow left one)."""
        try:
            self.filesystem.delete_dir(self._full(relative))
        except FileNotFoundError:
            pass
        except OSError as error:
            logger.warning("could not delete %s: %s", relative, error)

    def _delete(self, relative: str, deleted: list[str]) -> None:
        try:
            self.filesystem.delete_file(self._full(relative))
            deleted.append(relative)
        except FileNotFoundError:
            pass
        except OSError as error:
            logger.warning("checkpoint retention could not delete %s: %s", relative, error)

    # ---- plain file access (the key-group version chain, keyedstate.state.rocksdb.versions) --------------

    def read_bytes(self, relative: str) -> bytes:
        """A whole file; SnapshotCorruptedError names it when it is missing or unreadable."""
        return self._reading(lambda: self._read_all(relative), f"read {relative}", lambda error: SnapshotCorruptedError(
            f"{relative} in {self.location} is missing or unreadable: {error}"))

    def list_entries(self, relative_dir: str) -> list[tuple[str, bool, Optional[float]]]:
        """``(name, is directory, modification time in epoch seconds or None)`` of the direct children."""
        infos = self._list(self._full(relative_dir))
        return [(info.base_name, info.type == pafs.FileType.Directory,
                 info.mtime.timestamp() if info.mtime is not None else None) for info in infos]

    def delete_tree(self, relative: str) -> list[str]:
        """Delete a file or a directory with everything below it; returns the deleted paths (missing: none)."""
        info = self._info(relative)
        deleted: list[str] = []
        if info.type == pafs.FileType.Directory:
            for path in self.list_files(relative):
                self._delete(path, deleted)
            self._remove_dir(relative)
        elif info.type == pafs.FileType.File:
            self._delete(relative, deleted)
        return deleted

    def delete_files(self, paths: Iterable[str]) -> None:
        deleted: list[str] = []
        for path in paths:
            self._delete(path, deleted)
