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
import uuid
from typing import Optional

__all__ = ["TIMER_COUNTS_SUFFIX", "read_timer_counts", "write_timer_counts"]

TIMER_COUNTS_SUFFIX = ".timer-counts"
"""Appended to a key group's first database path for its file: ``<tag> <event-time timers> <processing-time
timers>``."""


def read_timer_counts(path: str, tag: str) -> Optional[tuple[int, int]]:
    """The (event-time, processing-time) timer counts of version ``tag``, if the file ``path`` holds them."""
    try:
        with open(path, encoding="ascii") as file:
            written_tag, event, processing = file.read().split()
        return (int(event), int(processing)) if written_tag == tag else None
    except (OSError, ValueError):
        return None


def write_timer_counts(path: str, tag: str, counts: tuple[int, int]) -> None:
    """Best effort (a file the next call cannot read costs it one scan)."""
    temporary = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(temporary, "w", encoding="ascii") as file:
            file.write(f"{tag} {counts[0]} {counts[1]}")
        os.replace(temporary, path)
    except OSError:
        try:
            os.remove(temporary)
        except OSError:
            pass
