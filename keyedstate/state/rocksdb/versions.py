"""Durable versions of one key group's RocksDB state: a base snapshot plus the changelogs written since.

A version is described by a small :class:`VersionRecord` that the caller keeps in its commit record (the Spark
state row): the tag of the version, the base snapshot's manifest file and the changelog files since, each with
size and sha256. Restoring a version = the base's files + every changelog replayed in order; every file is
verified against the checksum its referrer recorded, so a damaged file fails with an error naming it.

Layout under the storage root, one directory per key group (``kg-00007``)::

    kg-00007/sst/<sha256>.sst           SST files, content-addressed: a new base uploads only SSTs not stored yet
    kg-00007/b<batch>-<tag>.json        a base snapshot's manifest (SnapshotManifest JSON)
    kg-00007/b<batch>-<tag>/<name>      the base's small per-snapshot files (RocksDB MANIFEST, OPTIONS, CURRENT)
    kg-00007/c<batch>-<tag>.log         the changelog of one call (keyedstate.state.rocksdb.changelog)

Names carry the writer's unique tag, so a retried or duplicate attempt of a batch never overwrites a file another
attempt's record may name. Nothing is renamed: a file is complete once the record that names it is committed,
which suits object stores (no atomic rename) as well as file systems.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field, replace
from typing import Optional, Protocol

import msgpack

from keyedstate.checkpoint.manifest import FileEntry, SnapshotManifest
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import SnapshotCorruptedError, SnapshotError
from keyedstate.keygroups import KeyGroupRange
from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.rocksdb.changelog import ChangeLog

__all__ = ["VersionRecord", "SnapshotPolicy", "KeyGroupVersions", "ChangelogCache", "Where", "sha256_file"]

logger = logging.getLogger("keyedstate.checkpoint.versions")

_RECORD_VERSION = 1
_FILE_NAME = re.compile(r"^([bc])(\d+)-([0-9a-f]+)(\.json|\.log)?$")
# A file younger than this is never collected as unreferenced: a concurrent attempt may be about to name it.
_UNREFERENCED_GRACE_SECONDS = 600.0


@dataclass(frozen=True)
class SnapshotPolicy:
    """When a key group writes a new base snapshot instead of one more changelog.

    A new base is written when the changelogs since the base would exceed ``max_changelogs`` files, or more bytes
    than ``changelog_to_base_ratio`` times the base (at least ``min_changelog_bytes``): restore time stays bounded
    by about twice the base, and a base's upload is amortized over many calls.
    """

    max_changelogs: int = 64
    changelog_to_base_ratio: float = 1.0
    min_changelog_bytes: int = 1024 * 1024

    def wants_base(self, record: Optional["VersionRecord"], new_changes_bytes: int) -> bool:
        if record is None or record.base is None:
            pending = (record.changelog_bytes if record else 0) + new_changes_bytes
            count = (len(record.changelogs) if record else 0) + 1
            return count > self.max_changelogs or pending > self.min_changelog_bytes
        pending = record.changelog_bytes + new_changes_bytes
        bound = max(self.min_changelog_bytes, int(record.base_bytes * self.changelog_to_base_ratio))
        return len(record.changelogs) + 1 > self.max_changelogs or pending > bound


@dataclass(frozen=True)
class VersionRecord:
    """One committed version of a key group's state (kept in the commit record, a few hundred bytes)."""

    tag: str
    base: Optional[FileEntry]
    base_batch: Optional[int]
    base_bytes: int
    changelogs: tuple[FileEntry, ...] = ()
    retired: tuple[tuple[int, int], ...] = field(default=())
    """Earlier bases ``(base batch, batch that replaced it)`` that retained older records may still name."""
    location: str = ""
    """The storage root the file paths are relative to (lets a reader find the files from the record alone)."""
    origin: str = ""
    """The bootstrap the key group's state started from (``keyed_process(initial_state=...)``), or empty."""

    @property
    def changelog_bytes(self) -> int:
        return sum(entry.size for entry in self.changelogs)

    def to_bytes(self) -> bytes:
        # The record is rewritten with every call of the key group, so a changelog costs ~45 bytes in it: its
        # directory and name follow from (batch, tag), and the checksum is kept as raw bytes.
        directory = self.changelogs[0].path.rsplit("/", 1)[0] if self.changelogs else ""
        changelogs = [[entry.name, entry.size, bytes.fromhex(entry.checksum)] for entry in self.changelogs]
        fields = [
            _RECORD_VERSION, self.tag, self.base.to_json() if self.base else None, self.base_batch, self.base_bytes,
            directory, changelogs, [list(pair) for pair in self.retired], self.location,
        ]
        if self.origin:  # appended only when set: records of queries without an initial state keep their bytes
            fields.append(self.origin)
        return msgpack.packb(fields, use_bin_type=True)

    @classmethod
    def from_bytes(cls, data: bytes) -> "VersionRecord":
        try:
            fields = msgpack.unpackb(data, raw=False)
            (version, tag, base, base_batch, base_bytes, directory, changelogs, retired, location) = fields[:9]
            origin = fields[9] if len(fields) > 9 else ""
            if len(fields) > 10:
                raise ValueError(f"{len(fields)} fields, at most 10 expected")
            if version != _RECORD_VERSION:
                raise ValueError(f"record version {version} is not {_RECORD_VERSION}")
            return cls(str(tag), FileEntry.from_json(base) if base else None, base_batch, int(base_bytes),
                       tuple(FileEntry(f"{directory}/{name}", name, int(size), checksum.hex())
                             for name, size, checksum in changelogs),
                       tuple((int(a), int(b)) for a, b in retired), str(location), str(origin))
        except Exception as error:
            raise SnapshotCorruptedError(f"the key group's version record cannot be decoded ({error})") from error


def _position_in_chain(record: VersionRecord, tag: Optional[str]) -> Optional[int]:
    """How many of ``record``'s changelogs version ``tag`` already holds: 0 for the base's tag, i + 1 for the tag
    that wrote changelog i (file names carry the writer's tag); None when ``tag`` is not in the chain."""
    if not tag:
        return None
    if record.base is not None and record.base.name.endswith(f"-{tag}.json"):
        return 0
    for position, entry in enumerate(record.changelogs):
        if entry.name.endswith(f"-{tag}.log"):
            return position + 1
    return None


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(4 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


class Where:
    """Names what a file belongs to (a key group and batch, a bootstrap) in CheckpointStorage's verification errors."""

    def __init__(self, text: str) -> None:
        self.text = text

    def describe(self) -> str:
        return self.text


class ChangelogCache(Protocol):
    """A nearer copy of one key group's changelogs (Spark's executor-local one:
    :class:`keyedstate.spark.local_changelogs.LocalChangelogs`)."""

    def keep(self, name: str, data: bytes) -> None:
        """The changelog ``name`` was just stored with these bytes."""

    def read(self, entry: FileEntry) -> Optional[bytes]:
        """The changelog's bytes, verified against ``entry``'s size and checksum, or None (read storage then)."""

    def clear(self) -> None:
        """A new base was stored: no version after it needs an older changelog."""


class KeyGroupVersions:
    """Reads and writes the durable versions of one key group in ``storage``; changelogs are read from ``cache``
    when it has them, and every changelog written is also given to it."""

    def __init__(self, storage: CheckpointStorage, key_group: int, num_key_groups: int,
                 cache: Optional[ChangelogCache] = None) -> None:
        self.storage = storage
        self.key_group = key_group
        self.num_key_groups = num_key_groups
        self.directory = f"kg-{key_group:05d}"
        self.cache = cache

    # ---- restore -------------------------------------------------------------------------------------------------

    def restore(self, record: VersionRecord, local_path: str) -> list[ChangeLog]:
        """Download the base of ``record`` into the empty directory ``local_path``; return the changelogs to replay
        after opening it (in order). Every file is verified before it is used."""
        shutil.rmtree(local_path, ignore_errors=True)
        os.makedirs(local_path)
        if record.base is not None:
            manifest = self.read_manifest(record.base, record.base_batch)
            where = Where(f"key group {self.key_group} base snapshot of batch {record.base_batch}")
            for entry in manifest.files:
                self.storage.download_verified(entry, where, os.path.join(local_path, entry.name))
        return self.read_changelogs(record)

    def read_changelogs(self, record: VersionRecord) -> list[ChangeLog]:
        """The changelogs of ``record`` in order, each verified."""
        return [self._read_changelog(entry) for entry in record.changelogs]

    @staticmethod
    def is_in_chain(record: VersionRecord, tag: Optional[str]) -> bool:
        """Whether :meth:`changelogs_after` can bring version ``tag`` up to ``record`` (reads no file)."""
        return _position_in_chain(record, tag) is not None

    def changelogs_after(self, record: VersionRecord, tag: Optional[str]) -> Optional[list[ChangeLog]]:
        """The changelogs that turn version ``tag`` of ``record``'s chain into ``record``'s version (each verified):
        all of them when ``tag`` is the base's, the ones after it when ``tag`` wrote one of them; None when ``tag`` is
        not in the chain (a version Spark did not commit, or one before the base). Lets a local database kept at an
        older committed version catch up instead of being rebuilt from the base."""
        position = _position_in_chain(record, tag)
        if position is None:
            return None
        return [self._read_changelog(entry) for entry in record.changelogs[position:]]

    def newest_batch(self) -> Optional[int]:
        """The newest batch that stored a file of this key group (None when it has none)."""
        batches = [int(match.group(2)) for name, _, _ in self.storage.list_entries(self.directory)
                   if (match := _FILE_NAME.match(name)) is not None]
        return max(batches, default=None)

    def read_manifest(self, entry: FileEntry, batch: Optional[int]) -> SnapshotManifest:
        where = Where(f"key group {self.key_group} base snapshot of batch {batch}")
        data = self.storage.read_verified(entry, where)
        return SnapshotManifest.from_bytes(data, f"{entry.path} in {self.storage.location}")

    def _read_changelog(self, entry: FileEntry) -> ChangeLog:
        data = self.cache.read(entry) if self.cache is not None else None
        if data is None:
            data = self.storage.read_verified(entry, Where(f"key group {self.key_group} changelog {entry.name}"))
        return ChangeLog.decode(data, f"{entry.path} in {self.storage.location}")

    # ---- writing -------------------------------------------------------------------------------------------------

    def write_changelog(self, record: Optional[VersionRecord], encoded: bytes, batch: int, tag: str) -> VersionRecord:
        """Store an encoded :class:`ChangeLog` as the next version."""
        name = f"c{batch:012d}-{tag}.log"
        entry = self.storage.write_bytes(f"{self.directory}/{name}", encoded, name)
        if self.cache is not None:
            self.cache.keep(name, encoded)
        if record is None:
            return VersionRecord(tag, None, None, 0, (entry,), location=self.storage.location)
        return replace(record, tag=tag, changelogs=record.changelogs + (entry,))

    def write_base(self, record: Optional[VersionRecord], checkpoint_dir: str, batch: int, tag: str,
                   states: list[StateMetadata], raw_columns: list[str], retain_batches: int) -> tuple[VersionRecord, int]:
        """Store the RocksDB checkpoint in ``checkpoint_dir`` as the new base; returns the new record and the bytes
        uploaded (SSTs the previous base already stored are referenced, not uploaded)."""
        stored = self._stored_ssts(record)
        files: list[FileEntry] = []
        uploaded = 0
        for name in sorted(os.listdir(checkpoint_dir)):
            path = os.path.join(checkpoint_dir, name)
            if name.endswith(".log") and os.path.getsize(path) == 0:
                continue  # the empty write-ahead log (writes skip it): RocksDB opens without it
            if name.endswith(".sst"):
                checksum = sha256_file(path)
                entry = stored.get(checksum)
                if entry is None or entry.size != os.path.getsize(path):
                    entry = self.storage.upload_file(path, f"{self.directory}/sst/{checksum}.sst", name, shared=True,
                                                     checksum=checksum)
                    uploaded += entry.size
                else:
                    entry = replace(entry, name=name)
            else:
                entry = self.storage.upload_file(path, f"{self.directory}/b{batch:012d}-{tag}/{name}", name)
                uploaded += entry.size
            files.append(entry)
        manifest = SnapshotManifest(
            checkpoint_id=batch, scope=self.directory, backend_kind="rocksdb",
            key_group_range=KeyGroupRange(self.key_group, self.key_group), num_key_groups=self.num_key_groups,
            states=sorted(states, key=lambda s: s.name), raw_columns=sorted(raw_columns), files=files,
            uploaded_bytes=uploaded, total_bytes=sum(e.size for e in files), created_at_ms=time.time_ns() // 1_000_000,
        )
        name = f"b{batch:012d}-{tag}.json"
        base = self.storage.write_bytes(f"{self.directory}/{name}", manifest.to_bytes(), name)
        uploaded += base.size
        retired: tuple[tuple[int, int], ...] = ()
        if record is not None and record.base_batch is not None:
            # A version v names a retired base iff v is older than the batch that replaced the base. Readable
            # versions: the newest retain_batches Spark keeps, and, until this batch commits, the one before it (a
            # retry of this batch restores from it), so batch - retain_batches .. batch - 1.
            retired = tuple(pair for pair in record.retired + ((record.base_batch, batch),)
                            if pair[1] > batch - retain_batches)
        origin = record.origin if record is not None else ""
        new = VersionRecord(tag, base, batch, manifest.total_bytes, (), retired, self.storage.location, origin)
        if self.cache is not None:
            self.cache.clear()
        self.collect_garbage(new)
        return new, uploaded

    def _stored_ssts(self, record: Optional[VersionRecord]) -> dict[str, FileEntry]:
        if record is None or record.base is None:
            return {}
        try:
            manifest = self.read_manifest(record.base, record.base_batch)
        except SnapshotError as error:  # only loses the reuse of stored files, never correctness
            logger.warning("key group %d: uploading every SST again: %s", self.key_group, error)
            return {}
        return {entry.checksum: entry for entry in manifest.files if entry.shared}

    # ---- garbage collection --------------------------------------------------------------------------------------

    def collect_garbage(self, record: VersionRecord) -> list[str]:
        """Delete what no record that may still be read names: bases, their files and changelogs older than the
        oldest base ``record`` keeps (its own and the retired ones), and SSTs that no remaining base names."""
        keep_from = min([record.base_batch or 0] + [batch for batch, _ in record.retired])
        names = self.storage.list_entries(self.directory)
        doomed: list[str] = []
        remaining_manifests: list[str] = []
        for name, is_dir, _ in names:
            match = _FILE_NAME.match(name)
            if match is None:
                continue
            if int(match.group(2)) < keep_from:
                doomed.append(name)
            elif match.group(1) == "b" and match.group(4) == ".json":
                remaining_manifests.append(name)
        referenced: set[str] = set()
        for name in remaining_manifests:
            paths = self._manifest_paths(name)
            if paths is None:
                return []  # an unreadable base could name any SST: delete nothing this time
            referenced |= paths
        released: set[str] = set()
        for name in doomed:
            if name.endswith(".json"):
                released |= self._manifest_paths(name) or set()
        deleted = []
        for name in doomed:
            deleted += self.storage.delete_tree(f"{self.directory}/{name}")
        now = time.time()
        for name, _, mtime in self.storage.list_entries(f"{self.directory}/sst"):
            path = f"{self.directory}/sst/{name}"
            if path in referenced:
                continue
            # An SST only a deleted base named goes now; one no base names yet may belong to a base being written.
            if path in released or (mtime is not None and now - mtime > _UNREFERENCED_GRACE_SECONDS):
                deleted += self.storage.delete_tree(path)
        if deleted:
            logger.debug("key group %d: deleted %d state files no retained version names", self.key_group, len(deleted))
        return deleted

    def _manifest_paths(self, name: str) -> Optional[set[str]]:
        try:
            data = self.storage.read_bytes(f"{self.directory}/{name}")
            return {entry.path for entry in SnapshotManifest.from_bytes(data, name).files}
        except SnapshotError:
            return None
