"""The savepoint writer's decoder (no Spark): every record goes to its key group of the new number of key groups, its
bytes (TTL timestamp included) and its timers unchanged, and key types that do not match the keys are refused
instead of misplacing state."""

from __future__ import annotations

import pandas as pd
import pytest

from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import key_group_of_key, key_group_prefix
from keyedstate.serialization import encode_key
from keyedstate.spark.savepoint_records import EVENT_TIMERS, SourceDecoder, decode_chunk, encode_chunk
from keyedstate.spark.savepoint_writer import _HeapGroup
from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.base.layout import VOID_NAMESPACE
from keyedstate.state.key_groups.row_format import (
    STATE_ROW_FORMAT_FULL,
    StateRow,
    decode_state_payload,
    encode_state_payload,
)
from timers.codec import encode_key_group_blob
from timers.timer import InternalTimer

KEYS = list(range(100, 120))
METADATA = StateMetadata("count", "value", "LONG", True).to_json()


def rows(num_key_groups: int) -> pd.DataFrame:
    """One heap row per key group holding KEYS (bigint keys): a TTL'd value and one event-time timer each."""
    by_group: dict[int, list[int]] = {}
    for key in KEYS:
        by_group.setdefault(key_group_of_key(key, num_key_groups, types=["bigint"]), []).append(key)
    out = []
    for group, keys in sorted(by_group.items()):
        prefix = key_group_prefix(group)
        records = [(prefix + encode_key(key) + VOID_NAMESPACE, (1_000 + key).to_bytes(8, "big") + b"v")
                   for key in keys]
        timers = [InternalTimer((key * 10, prefix + encode_key(key), VOID_NAMESPACE, group)) for key in keys]
        row = StateRow(STATE_ROW_FORMAT_FULL, num_key_groups, encode_state_payload([(METADATA, records)]),
                       encode_key_group_blob(group, timers, []))
        out.append(row.to_tuple())
    return pd.DataFrame(out, columns=["format", "key_groups", "state", "timers", "base_snapshot", "tag"])


def decoded(decoder: SourceDecoder, frame: pd.DataFrame) -> dict[int, tuple[list, list]]:
    by_group: dict[int, tuple[list, list]] = {}
    for out in decoder(iter([frame])):
        for group, chunk in zip(out["key_group"], out["chunk"]):
            states, raw = decode_chunk(chunk)
            target = by_group.setdefault(int(group), ([], []))
            for _, flat in states:
                target[0].extend(zip(flat[0::2], flat[1::2]))
            for column, flat in raw:
                assert column == EVENT_TIMERS
                target[1].extend(flat[0::2])
    return by_group


@pytest.mark.parametrize("source, target", [(4, 8), (8, 3)])
def test_every_key_goes_to_its_new_key_group_with_its_bytes_and_timer(source, target):
    decoder = SourceDecoder("rows", ("bigint",), source, target, None, None, None)
    by_group = decoded(decoder, rows(source))
    seen = set()
    for group, (records, timers) in by_group.items():
        for suffix, entry in records:
            key = int.from_bytes(entry[:8], "big") - 1_000
            assert suffix == encode_key(key) + VOID_NAMESPACE and entry[8:] == b"v"
            assert key_group_of_key(key, target, types=["bigint"]) == group
            seen.add(key)
        assert len(timers) == len(records)  # each key's timer moved with it
    assert seen == set(KEYS)


def test_key_types_that_do_not_match_the_keys_are_refused():
    decoder = SourceDecoder("rows", ("int",), 4, 8, None, None, None)  # the keys were hashed as bigint
    with pytest.raises(ConfigurationError, match="would misplace its state. Pass key_schema"):
        decoded(decoder, rows(4))


def test_entries_of_a_dropped_state_or_an_earlier_incarnation_are_not_copied():
    current = SourceDecoder("rows", ("bigint",), 4, 4, None, None, None, live_states={"count": 0})
    assert sum(len(records) for records, _ in decoded(current, rows(4)).values()) == len(KEYS)
    for live in ({"count": 1}, {"other": 0}):  # registered again since (a new incarnation), or dropped
        stale = SourceDecoder("rows", ("bigint",), 4, 4, None, None, None, live_states=live)
        by_group = decoded(stale, rows(4))
        assert sum(len(records) for records, _ in by_group.values()) == 0
        assert sum(len(timers) for _, timers in by_group.values()) == len(KEYS)  # timers are the key's, kept


def heap_group_payload(*metadata: StateMetadata) -> list[dict]:
    """The state metadata the savepoint writer records for one heap key group that got one chunk per ``metadata``."""
    group = _HeapGroup(0, 4)
    for index, each in enumerate(metadata):
        group.add(encode_chunk({each.name: (each.to_json(), [bytes([index]), b"v"])}, {}))
    row, records, _ = group.row("")
    assert records == len(metadata)
    return [state for state, _ in decode_state_payload(row.state)]


def test_a_state_widened_in_some_key_groups_only_is_written_with_the_wider_type():
    ints, longs = StateMetadata("n", "value", "value<INT>", False), StateMetadata("n", "value", "value<LONG>", False)
    for order in ((ints, longs), (longs, ints)):
        assert heap_group_payload(*order) == [longs.to_json()]


@pytest.mark.parametrize("other", [StateMetadata("n", "value", "value<STRING>", False),
                                   StateMetadata("n", "value", "value<INT>", True),
                                   StateMetadata("n", "list", "list<INT>", False)], ids=["type", "ttl", "kind"])
def test_a_state_stored_differently_in_some_key_groups_cannot_be_merged(other):
    with pytest.raises(ConfigurationError, match="a savepoint cannot merge them"):
        heap_group_payload(StateMetadata("n", "value", "value<INT>", False), other)
