"""How many timers a committed RocksDB-mode version of a key group holds, kept beside its local database.

The RocksDB timer queues know their size exactly once they have counted it (one scan of the key group's timers)
and keep it up to date from then on; the metrics ask for it at the end of every call. Without this file every call
would scan again, a cost that grows with the state. A count is a fact about one version, and version tags are
unique per call, so the file names the tag it belongs to and is used only for a committed row with that tag: by any
process and any copy of the key group's database, whichever way the copy reached that version (kept open, caught up
with changelogs, rebuilt). One file per key group, shared by its copies (:class:`~keyedstate.state.key_groups.
versioned.LocalCopy` ``timer_counts``); the last call's counts win.
"""

from __future__ import annotations

import os
import zlib
from typing import Optional

__all__ = ["TIMER_COUNTS_SUFFIX", "read_timer_counts", "write_timer_counts"]

TIMER_COUNTS_SUFFIX = ".timer-counts"
"""Appended to a key group's first database path for its file: ``<tag> <event-time timers> <processing-time
timers> <crc32>``, padded to :data:`_WIDTH` bytes."""

# Written in place at a fixed width instead of by rename: replacing a file by rename costs ext4 a flush of the new
# file's data (about 0.3 ms, on every call of every key group). The CRC makes a torn or interleaved write of two
# processes read as no counts, which costs one scan.
_WIDTH = 128


def read_timer_counts(path: str, tag: str) -> Optional[tuple[int, int]]:
    """The (event-time, processing-time) timer counts of version ``tag``, if the file ``path`` holds them."""
    try:
        with open(path, "rb") as file:
            written_tag, event, processing, crc = file.read(_WIDTH).decode("ascii").split()
        if written_tag != tag or int(crc, 16) != zlib.crc32(_body(written_tag, int(event), int(processing))):
            return None
        return int(event), int(processing)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def write_timer_counts(path: str, tag: str, counts: tuple[int, int]) -> None:
    """Best effort (a file the next call cannot read costs it one scan)."""
    body = _body(tag, *counts)
    record = b"%s %08x" % (body, zlib.crc32(body))
    if len(record) > _WIDTH:
        return
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        os.pwrite(descriptor, record.ljust(_WIDTH), 0)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _body(tag: str, event: int, processing: int) -> bytes:
    return f"{tag} {event} {processing}".encode("ascii")
