"""Read the keyed state of a keyed_process query back from its checkpoint (for tests, debugging, audits).

Uses Spark's state data source (``spark.read.format("statestore")``, Spark 3.5+) to get the key-group rows, then
decodes every key's state and timers.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from keyedstate.serialization import DEFAULT_CODEC, PickleValueCodec, decode_key
from keyedstate.spark.row_format import StateRow, decode_state_payload
from keyedstate.state.base.backend import StateMetadata
from keyedstate.state.base.layout import KEY_GROUP_PREFIX_BYTES
from keyedstate.state.descriptors import StateDescriptor
from timers import decode_key_group_blob

__all__ = ["read_keyed_state", "decode_state_row"]

_PICKLE = PickleValueCodec()


def _deserializer(metadata: StateMetadata, descriptors: dict[str, StateDescriptor]) -> Any:
    descriptor = descriptors.get(metadata.name)
    if descriptor is not None:
        return descriptor.type_info.serializer.deserialize
    return _PICKLE.deserialize if "PICKLED_BYTE_ARRAY" in metadata.signature else DEFAULT_CODEC.deserialize


def decode_state_row(row: StateRow, descriptors: Sequence[StateDescriptor] = ()) -> dict[Any, dict[str, Any]]:
    """``{key: {state name: value, "__timers__": [(domain, timestamp), ...]}}`` of one key group's row.

    Values are plain Python values (list state as a list, map state as a dict); TTL timestamps are dropped.
    """
    by_name = {d.name: d for d in descriptors}
    result: dict[Any, dict[str, Any]] = {}
    for metadata_json, records in decode_state_payload(row.state):
        metadata = StateMetadata.from_json(metadata_json)
        deserialize = _deserializer(metadata, by_name)
        for stored_key, entry in records:
            key, offset = decode_key(stored_key, KEY_GROUP_PREFIX_BYTES)
            _, offset = decode_key(stored_key, offset)  # namespace
            value = deserialize(entry[8:] if metadata.has_ttl else entry)
            states = result.setdefault(key, {})
            if metadata.kind == "list":
                states.setdefault(metadata.name, []).append(value)
            elif metadata.kind == "map":
                user_key, _ = decode_key(stored_key, offset)
                states.setdefault(metadata.name, {})[user_key] = value
            else:
                states[metadata.name] = value
    if row.timers:
        _, event_timers, processing_timers = decode_key_group_blob(row.timers)
        for domain, timers in (("event_time", event_timers), ("processing_time", processing_timers)):
            for timer in timers:
                result.setdefault(timer.key, {}).setdefault("__timers__", []).append((domain, timer.timestamp))
    for states in result.values():
        if "__timers__" in states:
            states["__timers__"].sort()
    return result


def read_keyed_state(
    spark: Any,
    checkpoint_location: str,
    *,
    descriptors: Sequence[StateDescriptor] = (),
    batch_id: Optional[int] = None,
    operator_id: int = 0,
) -> dict[Any, dict[str, Any]]:
    """Every key's state (and pending timers) of a keyed_process query as of ``batch_id`` (default: the last
    committed batch). Pass the function's descriptors to decode values stored with custom serializers."""
    reader = spark.read.format("statestore").option("operatorId", operator_id)
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    frame = reader.load(checkpoint_location)
    value_type = frame.schema["value"].dataType
    # Spark's state format 2 nests the user's state row as value.groupState next to the timeout.
    column = "value.groupState" if "groupState" in value_type.fieldNames() else "value"
    result: dict[Any, dict[str, Any]] = {}
    for (state_row,) in frame.select(column).collect():
        if state_row is None:
            continue
        result.update(decode_state_row(StateRow.from_row(state_row), descriptors))
    return result
