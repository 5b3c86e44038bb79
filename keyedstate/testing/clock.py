"""A clock tests move by hand."""

from __future__ import annotations

__all__ = ["ManualClock"]


class ManualClock:
    """Epoch milliseconds that change only when a test says so; call the instance to read it."""

    def __init__(self, start_ms: int = 0) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def set(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def advance(self, delta_ms: int) -> int:
        self.now_ms += delta_ms
        return self.now_ms
