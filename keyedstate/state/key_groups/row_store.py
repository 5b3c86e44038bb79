"""Row mode (``state_backend="heap"``): a key group's whole state and timers live in its committed row (format 1).

On Spark the row is decoded into a heap backend at the start of every call and encoded again at its end, so a call
costs time proportional to the group's whole state; Spark's state store snapshots the row per micro-batch. The
harness writes the same row for every key group it holds when it takes a snapshot
(:class:`keyedstate.testing.snapshots.HarnessRowStore`).
"""

from __future__ import annotations

from typing import Any, Optional

from keyedstate.state.base.backend import KeyedStateBackend, StateMetadata
from keyedstate.state.base.kinds import HEAP
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.state.key_groups.initial_state import InitialState, check_origin
from keyedstate.state.key_groups.row_format import (
    STATE_ROW_FORMAT_FULL,
    StateRow,
    decode_state_payload,
    encode_state_payload,
)
from keyedstate.state.key_groups.store import KeyGroupStore, committed_row

__all__ = ["RowKeyGroupStore"]

Records = list[tuple[StateMetadata, list[tuple[bytes, bytes]]]]


class RowKeyGroupStore(KeyGroupStore):
    """One heap backend reused for every key group the worker runs (reset between groups).

    ``backend``: a backend to load into and save from instead (the harness's, holding many key groups; see
    :meth:`_export`). ``initial_state``: the bootstrap a query started from (key groups without a committed row
    load their bootstrapped row)."""

    def __init__(self, num_key_groups: int, ttl_clock: Any = None, backend: Optional[KeyedStateBackend] = None,
                 initial_state: Optional[InitialState] = None) -> None:
        self.num_key_groups = num_key_groups
        self.initial_state = initial_state
        # every row of a query started from a bootstrap carries its id (see keyedstate.state.key_groups.initial_state)
        self.origin = initial_state.bootstrap_id if initial_state is not None else None
        # Values are serialized when the row is written at the end of the call, which fails the whole (atomic)
        # batch on an unserializable value; validating every write as well would only slow the hot path.
        self.backend = backend if backend is not None else HeapKeyedStateBackend(
            num_key_groups=num_key_groups, ttl_clock=ttl_clock, validate_writes=False)

    def load(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any) -> None:
        row = committed_row(group_state, self.num_key_groups, HEAP)
        if row is not None:
            check_origin(key_group, row.tag, self.initial_state)
        elif self.initial_state is not None:
            row = self.initial_state.row(key_group)
        if row is None:
            return
        for metadata, records in decode_state_payload(row.state):
            self.backend.load_stored_records(StateMetadata.from_json(metadata), records)
        if row.timers:
            timer_service.import_key_group(row.timers, key_group)

    def _export(self, key_group: int) -> Records:
        """The records of ``key_group``'s states: on Spark everything the backend holds (one key group per call)."""
        return self.backend.export_records()

    def save(self, key_group: int, group_state: Any, batch_id: Optional[int], timer_service: Any,
             has_timers: bool) -> tuple[bool, int]:
        records = self._export(key_group)
        if not records and not has_timers:
            if self.initial_state is not None and self.initial_state.holds(key_group):
                # an empty row, not none: without a row the next call would load the bootstrapped state again
                group_state.update(StateRow(STATE_ROW_FORMAT_FULL, self.num_key_groups, b"", b"", None,
                                            self.origin).to_tuple())
                return True, 0
            # No timeout is set in this call, so Spark deletes the row (docs/spark.md, "One call per key group
            # and micro-batch").
            group_state.remove()
            return False, 0
        payload = encode_state_payload([(metadata.to_json(), recs) for metadata, recs in records])
        timer_blob = timer_service.export_key_group(key_group) if has_timers else b""
        group_state.update(StateRow(STATE_ROW_FORMAT_FULL, self.num_key_groups, payload, timer_blob, None,
                                    self.origin).to_tuple())
        return True, len(payload) + len(timer_blob)

    def finish(self, key_group: int, timer_service: Any, succeeded: bool) -> None:
        self.backend.reset()
        timer_service.clear_key_group(key_group)

    def keys_with_state(self) -> int:
        return self.backend.count_keys_with_state()
