"""An in-memory holder of one key group's committed row, with the surface of Spark's ``GroupState`` that the
key-group stores use: what a harness snapshot holds in place of Spark's state row."""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["MemoryGroupState"]


class MemoryGroupState:
    """``exists``, ``get``, ``update(row)`` and ``remove()`` over one row tuple (None: no row)."""

    __slots__ = ("row",)

    def __init__(self, row: Optional[tuple[Any, ...]] = None) -> None:
        self.row = row

    @property
    def exists(self) -> bool:
        return self.row is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self.row is None:
            raise ValueError("the key group has no committed row")
        return self.row

    def update(self, row: tuple[Any, ...]) -> None:
        self.row = tuple(row)

    def remove(self) -> None:
        self.row = None
