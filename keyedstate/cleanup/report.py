"""What a clean-up found, removed or would remove, and why it refused: the value of
:func:`keyedstate.cleanup.clean_up_query` and the text the command line prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

__all__ = ["CleanupItem", "CleanupReport"]

STATE_STORAGE = "state storage"
LOCAL_DATABASES = "local databases"
CONSUMER_GROUP = "consumer group"
CHECKPOINT = "checkpoint"


@dataclass(frozen=True)
class CleanupItem:
    """One thing a stopped query left behind.

    ``kind``: ``"state storage"`` (``<state_storage>/<query id>``), ``"local databases"``
    (``<state_local_dir>/<query id>`` on this machine), ``"consumer group"`` (a progress-marker group of the
    exactly-once Kafka sink) or ``"checkpoint"``; ``location``: its URI, path or group id; ``files`` and
    ``size_bytes`` for storage (None for groups); ``detail``: e.g. a group's state."""

    kind: str
    location: str
    files: Optional[int] = None
    size_bytes: Optional[int] = None
    detail: str = ""

    def describe(self) -> str:
        size = f"{self.files} files, {_human(self.size_bytes)}" if self.size_bytes is not None else ""
        extra = ", ".join(part for part in (size, self.detail) if part)
        return f"{self.kind:<16} {self.location}" + (f" ({extra})" if extra else "")


@dataclass(frozen=True)
class CleanupReport:
    """The outcome of a clean-up: ``items`` were removed (``dry_run=False``) or would be (``dry_run=True``).

    ``refusals``: why a real run refuses without ``force`` (a dry run reports them instead of raising); ``notes``:
    what was not looked at and why (no ``bootstrap_servers`` given, no state directory for the query)."""

    query_id: str
    checkpoint_location: str
    dry_run: bool
    items: tuple[CleanupItem, ...] = ()
    refusals: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def size_bytes(self) -> int:
        return sum(item.size_bytes or 0 for item in self.items)

    def of_kind(self, kind: str) -> list[CleanupItem]:
        return [item for item in self.items if item.kind == kind]

    def describe(self) -> str:
        lines = [f"query {self.query_id} (checkpoint {self.checkpoint_location})"]
        if not self.items:
            lines.append("nothing to remove")
        else:
            lines.append(f"{'would remove' if self.dry_run else 'removed'} ({_human(self.size_bytes)} of storage):")
            lines += [f"  {item.describe()}" for item in self.items]
        if self.refusals:
            lines.append("a real run refuses (--force / force=True overrides):" if self.dry_run else
                         "refused:")
            lines += [f"  - {reason}" for reason in self.refusals]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def _human(size: Optional[int]) -> str:
    value = float(size or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
