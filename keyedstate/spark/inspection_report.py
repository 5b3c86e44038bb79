"""What the checkpoint inspector found (:func:`keyedstate.spark.inspect_keyed_state`), as plain data, as text
(:meth:`KeyedStateInspection.describe`) and as JSON-ready dicts (:meth:`KeyedStateInspection.to_dict`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["KeyedStateInspection", "StateSummary", "TimerSummary", "KeyGroupSummary", "LargestKey", "StorageSummary"]


@dataclass(frozen=True)
class StateSummary:
    """One state name: the keys holding it, their entries (list elements, map entries; 1 for the other kinds) and
    the bytes of its stored records (stored key plus serialized value)."""

    name: str
    keys: int
    entries: int
    bytes: int


@dataclass(frozen=True)
class TimerSummary:
    """The pending timers of one time domain (``"event_time"`` or ``"processing_time"``): how many, the next and the
    last due time (epoch ms), how many are already due (at or before the batch's watermark for event time, at or
    before the batch's timestamp for processing time; they fire in the next batch), and a histogram by due time:
    ``(bin start, bin end, timers)`` with the end exclusive, equal-width bins from the next to the last due time.
    ``far_future``: timers due after the year 9999 (``Long.MAX_VALUE``: "never" or "at the end of the input"),
    counted in ``count`` but left out of the bins, which they would squeeze into one."""

    domain: str
    count: int
    next_due_ms: int
    last_due_ms: int
    due: Optional[int]
    histogram: tuple[tuple[int, int, int], ...]
    far_future: int = 0


@dataclass(frozen=True)
class KeyGroupSummary:
    """One key group holding state or timers: its keys, state bytes and timers; the bytes of its Spark state row,
    and in RocksDB mode those of the base snapshot and the changelogs its version names."""

    key_group: int
    keys: int
    state_bytes: int
    timers: int
    row_bytes: Optional[int] = None
    base_bytes: Optional[int] = None
    changelog_bytes: Optional[int] = None
    changelogs: Optional[int] = None


@dataclass(frozen=True)
class LargestKey:
    """A key among those with the most state bytes: its repr, key group, bytes, entries and pending timers."""

    key: str
    key_group: int
    bytes: int
    entries: int
    timers: int


@dataclass(frozen=True)
class StorageSummary:
    """Where the state of the batch is kept. ``row_bytes``: Spark's state rows (row mode: the whole state and
    timers; RocksDB mode: version records). RocksDB mode: ``base_bytes`` and ``changelog_bytes`` (and
    ``changelogs``, the files) are what the key groups' versions name, what a restore reads; ``stored_files`` and
    ``stored_bytes`` everything in the state storage location, every retained version's files (None when not
    listed)."""

    row_bytes: int
    base_bytes: Optional[int] = None
    changelog_bytes: Optional[int] = None
    changelogs: Optional[int] = None
    locations: tuple[str, ...] = ()
    stored_files: Optional[int] = None
    stored_bytes: Optional[int] = None


@dataclass(frozen=True)
class KeyedStateInspection:
    """The keyed state of one committed batch of a keyed_process checkpoint, aggregated in Spark.

    ``backend``: ``"heap"``, ``"rocksdb"`` or ``"empty"`` (no key group holds state). ``batch_id`` is None when the
    checkpoint's commit log could not be read (the last committed batch was read then); ``watermark_ms`` and
    ``batch_timestamp_ms`` are the batch's, from the offset log, when readable. ``key_bytes_histogram``: ``(low,
    high, keys)`` of keys whose state bytes are in ``[low, high)``, powers of two."""

    checkpoint: str
    batch_id: Optional[int]
    backend: str
    num_key_groups: Optional[int]
    keys: int
    state_bytes: int
    states: tuple[StateSummary, ...]
    timers: tuple[TimerSummary, ...]
    key_groups: tuple[KeyGroupSummary, ...]
    largest_keys: tuple[LargestKey, ...]
    key_bytes_histogram: tuple[tuple[int, int, int], ...]
    storage: StorageSummary
    watermark_ms: Optional[int] = None
    batch_timestamp_ms: Optional[int] = None

    @property
    def pending_timers(self) -> int:
        """Pending timers of both domains."""
        return sum(summary.count for summary in self.timers)

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain dicts, lists and numbers (``json.dumps`` takes it)."""
        return dataclasses.asdict(self)

    def describe(self, top: int = 10) -> str:
        """A text report for people: totals, states, timers, key groups (the largest ``top``), largest keys and
        storage."""
        lines = [f"checkpoint {self.checkpoint}",
                 f"batch {self.batch_id if self.batch_id is not None else '(last committed)'}, "
                 f"state backend {self.backend}, {self.num_key_groups or '?'} key groups"]
        if self.watermark_ms is not None:
            lines.append(f"watermark {_time(self.watermark_ms)}, batch time {_time(self.batch_timestamp_ms)}")
        held = len(self.key_groups)
        lines += ["", f"keys: {self.keys:,} in {held:,} key groups; state: {_bytes(self.state_bytes)}; "
                      f"pending timers: {self.pending_timers:,}", ""]
        lines.append("states (stored key + value bytes):")
        lines += [f"  {s.name:<24} {s.keys:>12,} keys {s.entries:>14,} entries {_bytes(s.bytes):>11}"
                  for s in self.states] or ["  (none)"]
        lines += ["", "pending timers:"]
        for timer in self.timers:
            due = f", {timer.due:,} already due" if timer.due is not None else ""
            lines.append(f"  {timer.domain}: {timer.count:,}, next due {_time(timer.next_due_ms)}, last "
                         f"{_time(timer.last_due_ms)}{due}")
            peak = max((count for _, _, count in timer.histogram), default=0)
            for start, _, count in timer.histogram:
                lines.append(f"    from {_time(start)} {count:>12,} {_bar(count, peak)}")
            if timer.far_future:
                lines.append(f"    after the year 9999 {timer.far_future:>8,} (not in the bins)")
        if not self.timers:
            lines.append("  (none)")
        if self.key_groups:
            keys = sorted(group.keys for group in self.key_groups)
            lines += ["", f"key groups: keys per group min {keys[0]:,}, median {keys[len(keys) // 2]:,}, "
                          f"max {keys[-1]:,}; the largest by state bytes:"]
            for group in sorted(self.key_groups, key=lambda g: (-g.state_bytes, g.key_group))[:top]:
                lines.append(f"  {group.key_group:>6} {group.keys:>12,} keys {_bytes(group.state_bytes):>11} "
                             f"{group.timers:>10,} timers")
        if self.largest_keys:
            lines += ["", "largest keys:"]
            lines += [f"  {k.key:<40} {_bytes(k.bytes):>11} {k.entries:>10,} entries {k.timers:>6,} timers "
                      f"(key group {k.key_group})" for k in self.largest_keys[:top]]
        lines += ["", "storage:", f"  Spark state rows: {_bytes(self.storage.row_bytes)}"]
        if self.storage.base_bytes is not None:
            lines.append(f"  named by the batch's versions: bases {_bytes(self.storage.base_bytes)}, "
                         f"changelogs {_bytes(self.storage.changelog_bytes or 0)} in "
                         f"{self.storage.changelogs or 0:,} files")
        if self.storage.stored_bytes is not None:
            lines.append(f"  in {', '.join(self.storage.locations)}: {self.storage.stored_files:,} files, "
                         f"{_bytes(self.storage.stored_bytes)} (every retained version)")
        return "\n".join(lines)


def _time(ms: Optional[int]) -> str:
    if ms is None:
        return "?"
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"  # Long.MAX_VALUE and friends


def _bytes(count: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def _bar(count: int, peak: int, width: int = 30) -> str:
    return "#" * (round(width * count / peak) if peak else 0)
