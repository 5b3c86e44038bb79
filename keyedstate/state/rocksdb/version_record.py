"""The record of one committed version of a key group's RocksDB state, and which versions can catch up to it.

The record names the base snapshot and the changelogs written since, each changelog's file name carrying the tag of
the version that wrote it. A local database at an older version of the same chain catches up by replaying the
changelogs after it. Right after a new base, the record also names a *bridge*: the last changelogs of the previous
chain and the changelog of the batch that wrote the base (the same changes the base holds), so a database a few
versions behind the new base catches up too, instead of being rebuilt from the base. The bridge is dropped from the
record after :data:`BRIDGE_LENGTH` more changelogs, which bounds the record's size.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Optional

import msgpack

from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.errors import SnapshotCorruptedError

__all__ = ["VersionRecord", "BRIDGE_LENGTH", "tag_of"]

_RECORD_VERSION = 1
_FIELDS = 12

BRIDGE_LENGTH = 8
"""How many changelogs of the previous chain a bridge names (versions that far behind a new base catch up), and for
how many changelogs after the base the record keeps naming it."""


def tag_of(entry: FileEntry) -> str:
    """The tag of the version that wrote the file (``c<batch>-<tag>.log``, ``b<batch>-<tag>.json``)."""
    return entry.name.rsplit(".", 1)[0].split("-", 1)[1]


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
    bridge_from: str = ""
    """The tag of the version the bridge starts from (empty: no bridge)."""
    bridge: tuple[FileEntry, ...] = ()
    """The changelogs that turn version ``bridge_from`` into the base's version, in order."""

    @property
    def changelog_bytes(self) -> int:
        return sum(entry.size for entry in self.changelogs)

    def with_changelog(self, tag: str, entry: FileEntry) -> "VersionRecord":
        """The next version: this one plus the changelog ``entry`` that version ``tag`` wrote."""
        changelogs = self.changelogs + (entry,)
        keep_bridge = len(changelogs) <= BRIDGE_LENGTH
        return replace(self, tag=tag, changelogs=changelogs, bridge_from=self.bridge_from if keep_bridge else "",
                       bridge=self.bridge if keep_bridge else ())

    def bridge_to_next_base(self, base_changes: FileEntry) -> tuple[str, tuple[FileEntry, ...]]:
        """``(bridge_from, bridge)`` for the base that replaces this version's chain, whose own batch's changes are
        stored as ``base_changes``: this chain's last changelogs, from the version before the first of them (empty
        when the chain started from no state: then only its changelogs' versions can use the bridge)."""
        tail = self.changelogs[-BRIDGE_LENGTH:]
        if len(tail) < len(self.changelogs):
            start = tag_of(self.changelogs[-BRIDGE_LENGTH - 1])
        else:
            start = tag_of(self.base) if self.base is not None else ""
        return start, tail + (base_changes,)

    def changelogs_from(self, tag: Optional[str]) -> Optional[tuple[FileEntry, ...]]:
        """The changelogs that turn version ``tag`` into this version, in order; None when no chain this record
        names holds version ``tag`` (a version Spark did not commit, or one too far behind)."""
        if not tag:
            return None
        if self.base is not None and tag_of(self.base) == tag:
            return self.changelogs
        for position, entry in enumerate(self.changelogs):
            if tag_of(entry) == tag:
                return self.changelogs[position + 1:]
        if self.bridge:
            if tag == self.bridge_from:
                return self.bridge + self.changelogs
            for position, entry in enumerate(self.bridge[:-1]):  # the last one is the base's own version
                if tag_of(entry) == tag:
                    return self.bridge[position + 1:] + self.changelogs
        return None

    def to_bytes(self) -> bytes:
        # The record is rewritten with every call of the key group, so a changelog costs ~45 bytes in it: its
        # directory and name follow from (batch, tag), and the checksum is kept as raw bytes.
        directory = next((e.path.rsplit("/", 1)[0] for e in self.changelogs + self.bridge), "")
        fields = [
            _RECORD_VERSION, self.tag, self.base.to_json() if self.base else None, self.base_batch, self.base_bytes,
            directory, _entries(self.changelogs), [list(pair) for pair in self.retired], self.location,
        ]
        # appended only when set: records of queries without an initial state or a bridge keep their bytes
        if self.origin or self.bridge:
            fields.append(self.origin)
        if self.bridge:
            fields += [self.bridge_from, _entries(self.bridge)]
        data = msgpack.packb(fields, use_bin_type=True)
        _remember(data, self)
        return data

    @classmethod
    def from_bytes(cls, data: bytes) -> "VersionRecord":
        known = _RECENT.get(data) if type(data) is bytes else None
        if known is not None:
            return known
        record = cls._decode(data)
        _remember(data, record)
        return record

    @classmethod
    def _decode(cls, data: bytes) -> "VersionRecord":
        try:
            fields = msgpack.unpackb(data, raw=False)
            (version, tag, base, base_batch, base_bytes, directory, changelogs, retired, location) = fields[:9]
            if len(fields) > _FIELDS:
                raise ValueError(f"{len(fields)} fields, at most {_FIELDS} expected")
            if version != _RECORD_VERSION:
                raise ValueError(f"record version {version} is not {_RECORD_VERSION}")
            origin = fields[9] if len(fields) > 9 else ""
            bridge_from, bridge = (fields[10], fields[11]) if len(fields) > 11 else ("", [])
            return cls(str(tag), FileEntry.from_json(base) if base else None, base_batch, int(base_bytes),
                       _from_entries(directory, changelogs), tuple((int(a), int(b)) for a, b in retired),
                       str(location), str(origin), str(bridge_from), _from_entries(directory, bridge))
        except Exception as error:
            raise SnapshotCorruptedError(f"the key group's version record cannot be decoded ({error})") from error


# The records last encoded or decoded, by their bytes: a key group's call decodes the record its previous call
# encoded, most often in the same worker (a record names up to ~100 files, each a FileEntry to build). Records are
# immutable, and the encoding is exact (``from_bytes(record.to_bytes()) == record``), so either direction may fill it.
_RECENT: dict[bytes, VersionRecord] = {}
_RECENT_LIMIT = 512
_RECENT_LOCK = threading.Lock()  # eviction iterates the dict: one writer at a time (reads are single dict lookups)


def _remember(data: bytes, record: VersionRecord) -> None:
    with _RECENT_LOCK:
        if len(_RECENT) >= _RECENT_LIMIT:
            del _RECENT[next(iter(_RECENT))]
        _RECENT[data] = record


def _entries(entries: tuple[FileEntry, ...]) -> list[list]:
    return [[entry.name, entry.size, bytes.fromhex(entry.checksum)] for entry in entries]


def _from_entries(directory: str, entries: list) -> tuple[FileEntry, ...]:
    return tuple(FileEntry(f"{directory}/{name}", name, int(size), checksum.hex()) for name, size, checksum in entries)
