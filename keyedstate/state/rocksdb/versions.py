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
from dataclasses import dataclass, replace
from typing import Optional, Protocol

from keyedstate.checkpoint.manifest import FileEntry, SnapshotManifest
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import ConfigurationError, SnapshotError
from keyedstate.keygroups import KeyGroupRange
from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.base.kinds import ROCKSDB
from keyedstate.state.rocksdb.changelog import ChangeLog
from keyedstate.state.rocksdb.version_record import VersionRecord

__all__ = ["VersionRecord", "SnapshotPolicy", "KeyGroupVersions", "ChangelogCache", "Where", "sha256_file",
           "SMALL_BASE_UPLOAD"]

logger = logging.getLogger("keyedstate.checkpoint.versions")

_FILE_NAME = re.compile(r"^([bc])(\d+)-([0-9a-f]+)(\.json|\.log)?$")
# A file younger than this is never collected as unreferenced: a concurrent attempt may be about to name it.
_UNREFERENCED_GRACE_SECONDS = 600.0
_GOLDEN_FRACTION = (5 ** 0.5 - 1) / 2


@dataclass(frozen=True)
class SnapshotPolicy:
    """When a key group writes a new base snapshot instead of one more changelog.

    A new base is written when the changelogs since the base would exceed ``max_changelogs`` files, or more bytes
    than ``changelog_to_base_ratio`` times the base (at least ``min_changelog_bytes``): restore time stays bounded
    by about twice the base, and a base's upload is amortized over many calls.

    A base uploads only the SST files the stored base does not have, so it is cheap only when written by a local
    copy that holds them (on Spark each Python worker keeps its own copy). The copy that wrote or downloaded the
    stored base writes the next one when asked: no copy holds more of its files, even after compaction replaced
    them. Another copy that holds less than half of their bytes writes one more changelog instead, until the
    changelogs pass the bounds above by ``wait_for_descendant`` times (1.0: twice as many files or bytes); then any
    copy writes the base.

    Key groups that wrote bases in the same batch (every one does after a bulk load into RocksDB mode, a bootstrap
    or a savepoint) reach the bounds again together, so one batch in every cycle writes all their bases and takes
    seconds longer than the others at large state. ``spread`` scales each key group's bounds by a fixed factor of
    its own between ``1 - spread`` and ``1 + spread`` (key group 0: 1), so those bases fall in different batches:
    with 0.25 and 64 changelogs, the first cycle's bases spread over 48 to 80 changelogs and later cycles drift
    further apart. The bytes written stay about the same.
    """

    max_changelogs: int = 64
    changelog_to_base_ratio: float = 1.0
    min_changelog_bytes: int = 1024 * 1024
    wait_for_descendant: float = 1.0
    spread: float = 0.0

    def __post_init__(self) -> None:
        for name in ("max_changelogs", "changelog_to_base_ratio", "min_changelog_bytes", "wait_for_descendant",
                     "spread"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(f"SnapshotPolicy.{name} must be a number >= 0, got {value!r}")
        if self.spread >= 1:
            raise ConfigurationError(f"SnapshotPolicy.spread must be below 1 (a key group's bounds scale by 1 - spread "
                                     f"at least), got {self.spread!r}")

    def wants_base(self, record: Optional["VersionRecord"], new_changes_bytes: int, key_group: int = 0) -> bool:
        return self._past_bounds(record, new_changes_bytes, self.scale(key_group))

    def must_write_base(self, record: Optional["VersionRecord"], new_changes_bytes: int, key_group: int = 0) -> bool:
        """Past the bounds by ``wait_for_descendant``: a copy that holds few of the stored base's files writes the
        base too."""
        return self._past_bounds(record, new_changes_bytes, self.scale(key_group) * (1.0 + self.wait_for_descendant))

    def scale(self, key_group: int) -> float:
        """The key group's factor on every bound: ``1 + spread * (2u - 1)``, where ``u`` is the fractional part of
        ``0.5 + key_group * (golden ratio - 1)``, which spreads any run of consecutive key groups evenly."""
        if not self.spread:
            return 1.0
        return 1.0 + self.spread * (2.0 * ((0.5 + key_group * _GOLDEN_FRACTION) % 1.0) - 1.0)

    def _past_bounds(self, record: Optional["VersionRecord"], new_changes_bytes: int, factor: float) -> bool:
        if record is None or record.base is None:
            pending = (record.changelog_bytes if record else 0) + new_changes_bytes
            count = (len(record.changelogs) if record else 0) + 1
            return count > self.max_changelogs * factor or pending > self.min_changelog_bytes * factor
        pending = record.changelog_bytes + new_changes_bytes
        bound = max(self.min_changelog_bytes, int(record.base_bytes * self.changelog_to_base_ratio))
        return len(record.changelogs) + 1 > self.max_changelogs * factor or pending > bound * factor


SMALL_BASE_UPLOAD = 1024 * 1024
"""A base that uploads less than this is written when the policy asks, by any copy: waiting would save little."""


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

    def retain_only(self, names: set[str]) -> None:
        """A new base was stored: no version after it needs an older changelog than these (its bridge)."""


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
        return [self._read_changelog(entry) for entry in record.changelogs]

    @staticmethod
    def is_in_chain(record: VersionRecord, tag: Optional[str]) -> bool:
        """Whether :meth:`changelogs_after` can bring version ``tag`` up to ``record`` (reads no file)."""
        return record.changelogs_from(tag) is not None

    def changelogs_after(self, record: VersionRecord, tag: Optional[str]) -> Optional[list[ChangeLog]]:
        """The changelogs that turn version ``tag`` into ``record``'s version (each verified), or None when ``tag``
        is in no chain the record names (a version Spark did not commit, or one too far behind: see
        :meth:`VersionRecord.changelogs_from`). Lets a local database kept at an older committed version catch up
        instead of being rebuilt from the base. A bridge file that cannot be read (collected once its base was
        retired, or damaged) gives None too, since the base holds the same state: the caller rebuilds from it."""
        entries = record.changelogs_from(tag)
        if entries is None:
            return None
        try:
            return [self._read_changelog(entry) for entry in entries]
        except SnapshotError as error:
            bridge = {entry.name for entry in record.bridge}
            if not any(entry.name in bridge for entry in entries):
                raise
            logger.warning("key group %d: rebuilding from the base instead of catching up across it: %s",
                           self.key_group, error)
            return None

    def newest_batch(self) -> Optional[int]:
        """The newest batch that stored a file of this key group (None when it has none)."""
        batches = [int(match.group(2)) for name in self.storage.list_names(self.directory)
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

    def write_changelog(self, record: Optional[VersionRecord], encoded: bytes, batch: int, tag: str) -> VersionRecord:
        """Store an encoded :class:`ChangeLog` as the next version."""
        entry = self.store_changelog(encoded, batch, tag)
        if record is None:
            return VersionRecord(tag, None, None, 0, (entry,), location=self.storage.location)
        return record.with_changelog(tag, entry)

    def store_changelog(self, encoded: bytes, batch: int, tag: str) -> FileEntry:
        """Store an encoded :class:`ChangeLog` written by version ``tag`` (also given to the cache)."""
        name = f"c{batch:012d}-{tag}.log"
        entry = self.storage.write_bytes(f"{self.directory}/{name}", encoded, name)
        if self.cache is not None:
            self.cache.keep(name, encoded)
        return entry

    def write_base(self, record: Optional[VersionRecord], checkpoint_dir: str, batch: int, tag: str,
                   states: list[StateMetadata], raw_columns: list[str], retain_batches: int,
                   bridge: tuple[str, tuple[FileEntry, ...]] = ("", ())) -> tuple[VersionRecord, int]:
        """Store the RocksDB checkpoint in ``checkpoint_dir`` as the new base; returns the new record and the bytes
        uploaded (SSTs the previous base already stored are referenced, not uploaded). ``bridge``: what the record
        names to bring versions of the previous chain up to the base (:meth:`VersionRecord.bridge_to_next_base`)."""
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
            checkpoint_id=batch, scope=self.directory, backend_kind=ROCKSDB,
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
        new = VersionRecord(tag, base, batch, manifest.total_bytes, (), retired, self.storage.location, origin,
                            bridge_from=bridge[0], bridge=bridge[1])
        if self.cache is not None:
            self.cache.retain_only({entry.name for entry in new.bridge})
        self.collect_garbage(new)
        logger.debug("key group %d: the base of batch %d uploaded %d of its %d bytes", self.key_group, batch, uploaded,
                     manifest.total_bytes)
        return new, uploaded

    def should_write_base(self, record: VersionRecord, live_files: Optional[dict[str, int]], batch: int) -> bool:
        """Whether a new base written from a local database with these SSTs (path to size) uploads about what
        changed since ``record``'s base: the database still holds at least half of the base's SST bytes (it wrote
        or downloaded that base), or what it would upload is under :data:`SMALL_BASE_UPLOAD`. True when unknown
        (no live files named, no base, or its manifest unreadable). Only files whose name and size match a stored
        one are hashed, so a copy that holds none of them costs a directory listing."""
        total = sum(live_files.values()) if live_files else 0
        if not live_files or total < SMALL_BASE_UPLOAD:
            return True
        stored = {(entry.name, entry.size): entry.checksum for entry in self._stored_ssts(record).values()}
        stored_bytes = sum(size for _, size in stored)
        if not stored_bytes:
            return True
        shared = 0
        for path, size in live_files.items():
            checksum = stored.get((os.path.basename(path), size))
            try:
                if checksum is not None and sha256_file(path) == checksum:
                    shared += size
            except OSError:
                pass  # compacted away meanwhile: not part of the next base
        if shared * 2 >= stored_bytes or total - shared < SMALL_BASE_UPLOAD:
            return True
        logger.debug("key group %d, batch %d: a changelog instead of the base the policy asks for: this copy holds "
                     "%.0f%% of the stored base's files", self.key_group, batch, 100 * shared / stored_bytes)
        return False

    def _stored_ssts(self, record: Optional[VersionRecord]) -> dict[str, FileEntry]:
        if record is None or record.base is None:
            return {}
        try:
            manifest = self.read_manifest(record.base, record.base_batch)
        except SnapshotError as error:  # only loses the reuse of stored files, never correctness
            logger.warning("key group %d: uploading every SST again: %s", self.key_group, error)
            return {}
        return {entry.checksum: entry for entry in manifest.files if entry.shared}

    def collect_garbage(self, record: VersionRecord) -> list[str]:
        """Delete what no record that may still be read names: bases, their files and changelogs older than both the
        oldest base ``record`` keeps (its own and the retired ones) and its bridge's first changelog, and SSTs that
        no remaining base names."""
        bridge_start = [int(match.group(2)) for entry in record.bridge[:1] if (match := _FILE_NAME.match(entry.name))]
        keep_from = min([record.base_batch or 0] + [batch for batch, _ in record.retired] + bridge_start)
        doomed: list[str] = []
        remaining_manifests: list[str] = []
        for name in self.storage.list_names(self.directory):
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
