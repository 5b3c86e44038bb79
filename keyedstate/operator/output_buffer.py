"""Collects what a function yields: main-output records with their timestamps, and side outputs."""

from __future__ import annotations

from bisect import bisect_right
from types import GeneratorType
from typing import Any, Callable, Iterable, Optional

from keyedstate.api.time_domain import OutputTag
from keyedstate.errors import InvalidOutputError

__all__ = ["OutputBuffer", "short_repr"]

_NOT_ITERABLE_RESULTS = (str, bytes, bytearray, dict)
_RECORD_TYPES = (tuple, list, dict)  # a returned tuple of these is a tuple of records


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages that quote user data."""
    return _clip(repr(value), limit)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OutputBuffer:
    """Main output as parallel lists of records and timestamps (cheap to turn into one DataFrame), side outputs
    as lists of ``(value, timestamp)`` per tag id."""

    __slots__ = ("records", "timestamps", "side_outputs", "key_marks")

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.timestamps: list[Optional[int]] = []
        self.side_outputs: dict[str, list[tuple[Any, Optional[int]]]] = {}
        self.key_marks: list[tuple[int, Any]] = []
        """``(index of the first record, key)`` each time the key changed: errors about a record name its key."""

    def mark_key(self, key: Any) -> None:
        self.key_marks.append((len(self.records), key))

    @staticmethod
    def key_of(marks: list[tuple[int, Any]], index: int) -> Any:
        """The key whose call produced record ``index`` of a drained list, given the marks taken with it."""
        position = bisect_right(marks, index, key=lambda mark: mark[0]) - 1
        return marks[position][1] if position >= 0 else None

    def emit_side(self, tag: OutputTag, value: Any, timestamp: Optional[int]) -> None:
        if not isinstance(tag, OutputTag):
            raise InvalidOutputError(f"side outputs need an OutputTag, got {type(tag).__qualname__}")
        if value is None:
            raise InvalidOutputError(f"None was sent to side output {tag.tag_id!r}; emit a record or nothing")
        self.side_outputs.setdefault(tag.tag_id, []).append((value, timestamp))

    def collect(self, result: Any, timestamp: Optional[int], describe: Callable[[], str]) -> None:
        """Drain ``result`` (a generator, an iterable, or None). Errors raised by user code while the generator
        runs propagate unchanged; the caller wraps them."""
        if result is None:
            return
        if isinstance(result, _NOT_ITERABLE_RESULTS) or not isinstance(result, (GeneratorType, Iterable)):
            raise InvalidOutputError(
                f"{describe()} returned a {type(result).__qualname__}; it must yield output records (be a generator) "
                f"or return an iterable of records or None"
            )
        if isinstance(result, tuple) and result and not isinstance(result[0], _RECORD_TYPES):
            # `return "a", 1` would be walked as the two records "a" and 1
            record = ", ".join(map(repr, result)) if type(result) is tuple else repr(result)
            raise InvalidOutputError(
                f"{describe()} returned the tuple {short_repr(result, 80)}, which would be read as {len(result)} "
                f"separate records; yield the record instead (`yield {_clip(record, 80)}`), or return a list of "
                f"records"
            )
        records = self.records
        timestamps = self.timestamps
        for record in result:
            if type(record) is tuple and len(record) == 2 and isinstance(record[0], OutputTag):
                self.emit_side(record[0], record[1], timestamp)
                continue
            if record is None or isinstance(record, (GeneratorType, OutputTag)):
                raise InvalidOutputError(
                    f"{describe()} yielded {'None' if record is None else type(record).__qualname__}, which is not an "
                    f"output record; yield a tuple, dict, Row or value (or `output_tag, value` for a side output)"
                )
            records.append(record)
            timestamps.append(timestamp)

    def drain(self) -> tuple[list[Any], list[Optional[int]]]:
        records, timestamps = self.records, self.timestamps
        self.records, self.timestamps, self.key_marks = [], [], []
        return records, timestamps

    def drain_side(self, tag_id: str) -> list[tuple[Any, Optional[int]]]:
        return self.side_outputs.pop(tag_id, [])

    def drain_all_side(self) -> dict[str, list[tuple[Any, Optional[int]]]]:
        side, self.side_outputs = self.side_outputs, {}
        return side

    def __len__(self) -> int:
        return len(self.records)
