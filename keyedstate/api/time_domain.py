"""Time domains and side-output tags (PyFlink's names)."""

from __future__ import annotations

import enum
from typing import Any

from keyedstate.errors import ConfigurationError
from keyedstate.typeinfo import TypeInformation, to_type_information

__all__ = ["TimeDomain", "OutputTag", "MIN_WATERMARK", "MAX_WATERMARK"]

MIN_WATERMARK = -(2**63)
"""Flink's ``Long.MIN_VALUE``: the watermark before any watermark arrived."""

MAX_WATERMARK = 2**63 - 1
"""Flink's ``Long.MAX_VALUE``: the watermark at the end of a bounded input; every event-time timer fires."""


class TimeDomain(enum.Enum):
    """Which clock a timer follows: the watermark (event time) or the processing clock."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1


class OutputTag:
    """Names a side output: ``ctx.output(tag, value)`` or ``yield tag, value`` sends ``value`` there."""

    __slots__ = ("tag_id", "type_info")

    def __init__(self, tag_id: str, type_info: Any = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ConfigurationError(f"an OutputTag needs a non-empty str id, got {tag_id!r}")
        self.tag_id = tag_id
        self.type_info: TypeInformation = to_type_information(type_info)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"
