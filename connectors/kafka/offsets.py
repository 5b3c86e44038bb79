"""Offset JSON as Spark's Kafka source writes it: ``{"topic": {"0": 23, "1": 42}}``, values = next offset to read.

Used by the stream reader (the dicts it returns to Spark are written to the checkpoint's ``offsets/`` log) and by the
listener helper (which reads them back from that log).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

__all__ = ["TP", "to_offset_json", "from_offset_json", "fmt_offsets", "offsets_of_sources"]

TP = tuple[str, int]


def to_offset_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """``{(topic, partition): offset}`` -> Spark's nested dict, sorted for stable JSON."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def from_offset_json(obj: Mapping[str, Mapping[str, int]]) -> dict[TP, int]:
    """Spark's nested dict -> ``{(topic, partition): offset}``; raises ``ValueError`` if it is not one."""
    out: dict[TP, int] = {}
    for t, parts in obj.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"not a Kafka offset JSON: {obj!r}")
        for p, o in parts.items():
            out[(str(t), int(p))] = int(o)
    return out


def fmt_offsets(offsets: Mapping[TP, int]) -> str:
    return ", ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(offsets.items())) or "(none)"


def offsets_of_sources(sources: Sequence[Any], source_index: Optional[int],
                       reads_topic: Callable[[str], bool]) -> list[dict[TP, int]]:
    """The end offsets of one batch's sources (Spark's offset dicts; anything else is another kind of source) that
    can be ours: the one at ``source_index`` when given, else every Kafka source reading only ``reads_topic``'s
    topics (the caller refuses more than one)."""
    if source_index is not None:
        line = sources[source_index] if 0 <= source_index < len(sources) else None
        return [from_offset_json(line)] if line else []
    found = []
    for line in sources:
        try:
            offsets = from_offset_json(line) if line else {}
        except (ValueError, TypeError, AttributeError):
            continue
        if offsets and all(reads_topic(topic) for topic, _ in offsets):
            found.append(offsets)
    return found
