"""A randomized workload for the differential test of the compiled fast path (tests/test_fastpath_differential.py).

Run as ``python -m tests.fastpath_workload SEED...``: prints one JSON trace per seed of everything a user could
observe — every output record in order, the state of every key and the pending timers after every batch — from a
function that registers and deletes timers of both domains (int, numpy and datetime timestamps) while elements run and
while timers fire (through the one TimerService both callbacks get), and uses value, list and map state. The workload
runs through the Spark group function (key runs, the compiled row builder, timer calls and timer flush, one key
group), through the operator's key runs over many key groups (every pending timer and stored record traced), and
through the harness (one element at a time). The test runs this module with and without ``KEYEDSTATE_PURE_PYTHON`` and
compares the traces.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Row
from pyspark.sql.types import StringType, StructField, StructType

from keyedstate import (
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    Types,
    ValueStateDescriptor,
)
from keyedstate.keygroups import key_group_of_key
from keyedstate.operator import KeyedProcessOperator
from keyedstate.serialization import encode_key
from keyedstate.spark.group_function import _RUNTIMES, make_group_function
from keyedstate.spark.group_spec import GroupFunctionSpec
from keyedstate.spark.key_group_layout import balanced_grouping_value
from keyedstate.spark.options import KeyedProcessOptions
from keyedstate.spark.output_frames import OutputLayout
from keyedstate.state.base.layout import key_group_prefix
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.testing import KeyedProcessHarness
from timers import TimeDomain

COUNT = ValueStateDescriptor("count", Types.LONG())
ITEMS = ListStateDescriptor("items", Types.STRING())
SEEN = MapStateDescriptor("seen", Types.STRING(), Types.LONG())
KEYS = [f"k{i}" for i in range(6)]
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class Chaos(KeyedProcessFunction):
    """Each element's ``op`` picks what it does; timers re-register, delete and clear deterministically."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(COUNT)
        self.items = runtime_context.get_list_state(ITEMS)
        self.seen = runtime_context.get_map_state(SEEN)

    def process_element(self, value, ctx):
        timers = ctx.timer_service()
        ts = ctx.timestamp()
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        op, a = value["op"], value["a"]
        if op == 0:
            timers.register_event_time_timer(ts + a)
        elif op == 1:
            timers.delete_event_time_timer(ts + a)
        elif op == 2:
            timers.register_processing_time_timer(timers.current_processing_time() + a)
        elif op == 3:
            timers.delete_processing_time_timer(timers.current_processing_time() + a)
        elif op == 4:
            self.items.add(f"i{a}")
        elif op == 5:
            self.seen.put(f"s{a % 5}", a)
        elif op == 6:
            self.count.clear()
        elif op == 7:  # register then delete within one run: the net effect is no timer
            timers.register_event_time_timer(ts + a)
            timers.delete_event_time_timer(ts + a)
        yield ctx.get_current_key(), f"e{op}:{count}"

    def on_timer(self, timestamp, ctx):
        # the same TimerService as process_element's, not collecting: int timestamps take the compiled direct call,
        # numpy integers and datetimes the Python method
        timers = ctx.timer_service()
        step = timestamp % 5
        if step == 0:
            timers.register_event_time_timer(timestamp + 3)  # may fire in the same advance
        elif step == 1:
            timers.delete_event_time_timer(timestamp + 2)
            timers.delete_event_time_timer(EPOCH + dt.timedelta(milliseconds=timestamp + 4))
        elif step == 2:
            timers.register_processing_time_timer(timestamp + 7)
        elif step == 3:
            self.count.update((self.count.value() or 0) + 100)
            self.items.clear()
            timers.delete_processing_time_timer(timestamp + 4)
            timers.register_processing_time_timer(np.int64(timestamp + 11))
            timers.register_event_time_timer(np.int64(timestamp + 3))  # may fire in the same advance (as step 1)
        elif step == 4:  # delete and register again a timer that may be due in this advance: it still fires once
            timers.delete_event_time_timer(timestamp + 1)
            timers.register_event_time_timer(timestamp + 1)
        yield ctx.get_current_key(), f"t{ctx.time_domain()}:{timestamp}:{self.count.value()}"


def batches(seed: int) -> list[list[tuple[str, int, int, int]]]:
    """Batches of (key, event time ms, op, a), event times mostly increasing."""
    rng = random.Random(seed)
    out, now = [], 1_000
    for _ in range(6):
        batch = []
        for _ in range(rng.randrange(5, 40)):
            batch.append((rng.choice(KEYS), now + rng.randrange(-20, 60), rng.randrange(8), rng.randrange(1, 50)))
        out.append(batch)
        now += rng.randrange(20, 80)
    return out


def _state_of(read: Any) -> dict[str, Any]:
    return {key: read(key) for key in KEYS}


class _GroupState:
    """Spark's GroupState for one key group, with the watermark and batch time a test sets."""

    def __init__(self) -> None:
        self.row: Any = None
        self.watermark_ms = 0
        self.now_ms = 0
        self.timeout_ms: Any = None

    exists = property(lambda self: self.row is not None)
    get = property(lambda self: self.row)

    def update(self, row: Any) -> None:
        self.row = row

    def remove(self) -> None:
        self.row = None

    def setTimeoutTimestamp(self, timestamp: int) -> None:
        self.timeout_ms = timestamp

    def setTimeoutDuration(self, duration: int) -> None:
        self.timeout_ms = self.now_ms + duration

    def getCurrentWatermarkMs(self) -> int:
        return self.watermark_ms

    def getCurrentProcessingTimeMs(self) -> int:
        return self.now_ms


def through_group_function(seed: int) -> list[Any]:
    spec = GroupFunctionSpec(
        runtime_id=f"differential-{seed}", key_columns=("key",), value_columns=("key", "op", "a"),
        key_group_column="_kg", event_time_ms_column="_ms", options=KeyedProcessOptions(num_key_groups=1),
        layout=OutputLayout(StructType([StructField("key", StringType()), StructField("what", StringType())])),
    )
    function = make_group_function(spec, Chaos())
    state = _GroupState()
    trace: list[Any] = []
    try:
        for number, batch in enumerate(batches(seed)):
            state.now_ms = 10_000 + 40 * number
            frame = pd.DataFrame({
                "key": [k for k, _, _, _ in batch], "op": np.array([o for _, _, o, _ in batch], dtype="int64"),
                "a": np.array([a for _, _, _, a in batch], dtype="int64"),
                "_ms": np.array([t for _, t, _, _ in batch], dtype="int64"), "_kg": 0,
            })
            for out in function((balanced_grouping_value(0),), iter([frame]), state):
                trace.append(out.astype(object).where(out.notna(), None).values.tolist())
            trace.append(["timeout", state.timeout_ms])
            state.watermark_ms = max(t for _, t, _, _ in batch) - 10
    finally:
        _RUNTIMES.pop(spec.runtime_id, None)
    return trace


def through_harness(seed: int) -> list[Any]:
    trace: list[Any] = []
    with KeyedProcessHarness(Chaos(), key_selector=lambda row: row["key"]) as harness:
        for number, batch in enumerate(batches(seed)):
            harness.set_processing_time(10_000 + 40 * number)
            for key, ts, op, a in sorted(batch, key=lambda element: (element[0], element[1])):
                harness.process_element(Row(key=key, op=op, a=a), timestamp=ts)
            harness.process_watermark(max(t for _, t, _, _ in batch) - 10)
            trace.append([list(record) for record in harness.extract_output()])
            trace.append(_state_of(lambda key: [harness.state(key, COUNT).value(),
                                                list(harness.state(key, ITEMS).get() or []),
                                                sorted(harness.state(key, SEEN).items())]))
            trace.append([harness.num_event_time_timers(), harness.num_processing_time_timers()])
    return trace


def through_key_runs(seed: int) -> list[Any]:
    """The operator's key runs over many key groups (the group function uses one), tracing every pending timer and
    every stored record after each batch."""
    rng = random.Random(seed)
    operator = KeyedProcessOperator(Chaos(), HeapKeyedStateBackend(num_key_groups=16, validate_writes=False))
    operator.open()
    keys = [f"{key}-{n}" for key in KEYS for n in range(4)]
    service = operator.internal_timer_service
    trace: list[Any] = []
    for number, batch in enumerate([*batches(seed), []]):
        runs, values, timestamps = [], [], []
        for key in sorted({rng.choice(keys) for _ in batch}):
            start = len(values)
            for _, ts, op, a in rng.sample(batch, rng.randrange(1, min(6, len(batch)) + 1)):
                values.append(Row(key=key, op=op, a=a))
                timestamps.append(ts)
            runs.append((key, key_group_prefix(key_group_of_key(key, 16)) + encode_key(key), start, len(values)))
        operator.advance_processing_time(10_000 + 40 * number)
        operator.process_key_runs(runs, values, timestamps)
        operator.backend.clear_current_key()
        operator.advance_watermark(max(t for _, t, _, _ in batch) - 10 if batch else 2**63 - 1)  # last: all fire
        trace.append([list(record) for record in operator.outputs.drain()])
        trace.append([[[t.timestamp, t.key, t.key_group] for t in service.timers(domain)]
                      for domain in (TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME)])
        trace.append([[metadata.name, sorted(records)] for metadata, records in operator.backend.export_records()])
    operator.close()
    return trace


def main(seeds: list[int]) -> None:
    from keyedstate.fastpath import fastpath

    for seed in seeds:
        print(json.dumps({"seed": seed, "compiled": fastpath is not None,
                          "group_function": through_group_function(seed),
                          "harness": through_harness(seed), "key_runs": through_key_runs(seed)}, default=str))


if __name__ == "__main__":
    main([int(argument) for argument in sys.argv[1:]])
