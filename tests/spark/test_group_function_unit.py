"""The group function without Spark: element order, the Row records users get, null checks, errors."""

from __future__ import annotations

import datetime as dt
import pickle
from typing import Optional

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import Row
from pyspark.sql.types import LongType, StringType, StructField, StructType

from keyedstate import KeyedProcessFunction
from keyedstate.errors import ConfigurationError, NullKeyError, UserFunctionError
from keyedstate.spark.group_elements import column_values, first_null, group_order, key_codes, row_factory
from keyedstate.spark.group_function import _RUNTIMES, make_group_function
from keyedstate.spark.group_spec import GroupFunctionSpec
from keyedstate.spark.key_group_layout import balanced_grouping_value
from keyedstate.spark.options import EVENT_TIME, PROCESSING_TIME, KeyedProcessOptions
from keyedstate.spark.output_frames import OutputLayout
from keyedstate.state.key_groups.memory_group_state import MemoryGroupState


class FakeGroupState(MemoryGroupState):
    """The committed row of MemoryGroupState plus the rest of Spark's GroupState the group function calls."""

    def setTimeoutTimestamp(self, timestamp: int) -> None:
        pass

    def setTimeoutDuration(self, duration: int) -> None:
        pass

    def getCurrentWatermarkMs(self) -> int:
        return 0

    def getCurrentProcessingTimeMs(self) -> int:
        return 1_000


class Recorder(KeyedProcessFunction):
    seen: list = []

    def process_element(self, value, ctx):
        Recorder.seen.append((ctx.get_current_key(), value, ctx.timestamp()))
        if value[1] == "boom":
            raise ValueError("boom")
        yield str(ctx.get_current_key()), 1


def _run(
    frame: pd.DataFrame, key_columns=("user",), value_columns=("user", "payload", "ts"), event_time=True,
    grouping_value: Optional[int] = None, group_state: Optional[FakeGroupState] = None,
):
    Recorder.seen = []
    layout = OutputLayout(StructType([StructField("k", StringType()), StructField("n", LongType())]))
    spec = GroupFunctionSpec(
        runtime_id=f"unit-{id(frame)}", key_columns=tuple(key_columns), value_columns=tuple(value_columns),
        key_group_column="_keyedstate_key_group", event_time_ms_column="_ms" if event_time else None,
        layout=layout, options=KeyedProcessOptions(time_mode=EVENT_TIME if event_time else PROCESSING_TIME,
                                                   num_key_groups=4),
    )
    function = make_group_function(spec, Recorder())
    try:
        grouping_value = balanced_grouping_value(2) if grouping_value is None else grouping_value
        state = FakeGroupState() if group_state is None else group_state
        return list(function((grouping_value,), iter([frame]), state)), Recorder.seen
    finally:
        _RUNTIMES.pop(spec.runtime_id, None)


def test_the_pickled_group_function_carries_no_runtime_of_the_driver():
    from pyspark import cloudpickle

    _run(_frame(["a"], ["p"], [1]))
    spec = GroupFunctionSpec("pickle", ("user",), ("user",), "_keyedstate_key_group", None,
                             OutputLayout(StructType([StructField("k", StringType())])),
                             KeyedProcessOptions(time_mode=PROCESSING_TIME, num_key_groups=4))
    _RUNTIMES["leftover"] = object()  # type: ignore[assignment]
    try:
        data = cloudpickle.dumps(make_group_function(spec, Recorder()))
    finally:
        _RUNTIMES.pop("leftover", None)
    assert b"leftover" not in data and b"GroupRuntime" not in data


def _frame(users, payloads, ms) -> pd.DataFrame:
    return pd.DataFrame({
        "user": users, "payload": payloads, "ts": pd.to_datetime(ms, unit="ms"), "_ms": np.array(ms, dtype="int64"),
        "_keyedstate_key_group": 2,
    })


def test_elements_arrive_by_key_then_event_time_with_rows():
    frame = _frame(["b", "a", "b", "a", "a"], ["p1", "p2", "p3", "p4", "p5"], [30, 20, 10, 20, 5])
    _, seen = _run(frame)
    assert [(key, value.payload, ts) for key, value, ts in seen] == [
        ("b", "p3", 10), ("b", "p1", 30), ("a", "p5", 5), ("a", "p2", 20), ("a", "p4", 20),
    ]
    value = seen[2][1]
    assert isinstance(value, Row)
    assert value == Row(user="a", payload="p5", ts=dt.datetime(1970, 1, 1, 0, 0, 0, 5000))
    assert type(value.ts) is dt.datetime
    assert value.user == value["user"] == value[0] == "a"
    assert value.asDict() == {"user": "a", "payload": "p5", "ts": dt.datetime(1970, 1, 1, 0, 0, 0, 5000)}
    assert repr(value) == "Row(user='a', payload='p5', ts=datetime.datetime(1970, 1, 1, 0, 0, 0, 5000))"
    assert pickle.loads(pickle.dumps(value)) == value
    assert "payload" in value and tuple(value)[1] == "p5"


def test_several_key_columns_and_no_event_time():
    frame = _frame(["x", "x", "x"], ["2", "1", "2"], [1, 2, 3])
    _, seen = _run(frame, key_columns=("user", "payload"), event_time=False)
    assert [(key, ts) for key, _, ts in seen] == [(("x", "2"), None), (("x", "2"), None), (("x", "1"), None)]


def test_null_key_and_null_time_are_rejected():
    with pytest.raises(NullKeyError):
        _run(_frame(["a", None], ["p", "q"], [1, 2]))
    frame = _frame(["a", "b"], ["p", "q"], [1, 2])
    frame["_ms"] = [1.0, np.nan]
    with pytest.raises(ConfigurationError, match="null event time"):
        _run(frame)


def test_a_grouping_value_the_layout_never_produces_is_rejected():
    # Grouping by a column other than the one add_key_group_column adds would put keys in the wrong key group.
    with pytest.raises(ConfigurationError, match=r"grouping value 2 .*key_group_layout='balanced'.*num_key_groups=4"):
        _run(_frame(["a"], ["p"], [1]), grouping_value=2)
    with pytest.raises(ConfigurationError, match="is not one that"):
        _run(_frame(["a"], ["p"], [1]), grouping_value=balanced_grouping_value(4))  # key group 4 of 4


def test_a_key_group_gone_after_a_restart_with_fewer_key_groups_names_both_numbers():
    # Spark wakes the rows of key groups 4..6 (timeouts) after a restart from num_key_groups=7 to 4.
    from keyedstate.state.key_groups.row_format import STATE_ROW_FORMAT_FULL, StateRow

    state = FakeGroupState()
    state.update(StateRow(STATE_ROW_FORMAT_FULL, 7, b"", b"").to_tuple())
    with pytest.raises(ConfigurationError, match=r"batch .*num_key_groups=7 .*num_key_groups=4"):
        _run(_frame(["a"], ["p"], [1]), grouping_value=balanced_grouping_value(5), group_state=state)


def test_user_error_names_the_element_and_key():
    with pytest.raises(UserFunctionError, match=r"for key 'b' on element Row\(user='b', payload='boom'"):
        _run(_frame(["a", "b"], ["ok", "boom"], [1, 2]))


def test_row_factory_keeps_row_lookups_for_tuple_method_names():
    make = row_factory(["count", "index", "value", "value"])
    row = make((1, 2, 3, 4))
    assert callable(row.count) and row["count"] == 1 and row["index"] == 2
    assert row.value == 3 and row.asDict() == {"count": 1, "index": 2, "value": 4}  # as pyspark's Row does


@pytest.mark.parametrize("compiled", [pytest.param(True, marks=pytest.mark.compiled_only), False],
                         ids=["compiled", "python"])
def test_rows_builder_makes_the_rows_row_factory_makes_from_columns(monkeypatch, compiled):
    import keyedstate.spark.group_elements as group_elements

    if not compiled:
        monkeypatch.setattr(group_elements, "fastpath", None)
    elif group_elements.fastpath is None:
        pytest.fail("keyedstate._fastpath is not built")
    build = group_elements.rows_builder(["user", "count", "ts"])
    when = dt.datetime(2024, 1, 1)
    rows = build([["a", "b"], [1, None], [when, when]])
    assert rows == [Row(user="a", count=1, ts=when), Row(user="b", count=None, ts=when)]
    assert all(isinstance(row, Row) for row in rows)
    assert rows[1].user == "b" and rows[0]["ts"] is when and rows[0].asDict()["count"] == 1
    assert repr(rows[0]) == "Row(user='a', count=1, ts=datetime.datetime(2024, 1, 1, 0, 0))"
    assert pickle.loads(pickle.dumps(rows[0])) == rows[0]
    assert hash(rows[0]) == hash(("a", 1, when)) and rows[0] in {Row(user="a", count=1, ts=when)}
    assert build([[], [], []]) == []
    with pytest.raises(ValueError):
        build([["a"], [1, 2], [when]])


def test_grouping_and_column_values():
    codes, null = key_codes([pd.Series(["b", "a", "b", "c"])])
    assert null is None
    order, starts = group_order(codes, np.array([2, 1, 1, 0]))
    assert order.tolist() == [2, 0, 1, 3] and starts == [0, 2, 3]  # keys in order of first appearance
    codes, null = key_codes([pd.Series([1, "1", 1])])
    assert null is None and len(group_order(codes, None)[1]) == 2
    assert key_codes([pd.Series(["a", "b"]), pd.Series([1.0, np.nan])])[1] == 1
    times = pd.Series(pd.to_datetime([0, None], unit="ms"))
    assert column_values(times, np.array([1, 0])) == [None, dt.datetime(1970, 1, 1)]
    assert column_values(pd.Series([1, 2], dtype="Int64"), np.array([1, 0])) == [2, 1]
    assert first_null(pd.Series([1.0, np.nan])) == 1 and first_null(pd.Series([1, 2])) is None


class ShortRecordForB(KeyedProcessFunction):
    def process_element(self, value, ctx):
        key = ctx.get_current_key()
        yield (key,) if key == "b" else (key, 1)


def test_an_output_error_names_the_location_once_the_function_and_the_key():
    from keyedstate.errors import InvalidOutputError

    layout = OutputLayout(StructType([StructField("k", StringType()), StructField("n", LongType())]))
    spec = GroupFunctionSpec("short-b", ("user",), ("user", "payload", "ts"), "_keyedstate_key_group", "_ms",
                             layout, KeyedProcessOptions(num_key_groups=4))
    function = make_group_function(spec, ShortRecordForB())
    try:
        with pytest.raises(InvalidOutputError) as failure:
            list(function((balanced_grouping_value(2),), iter([_frame(["a", "b", "c"], ["p"] * 3, [1, 2, 3])]),
                          FakeGroupState()))
    finally:
        _RUNTIMES.pop(spec.runtime_id, None)
    message = str(failure.value)
    assert message.count("keyed_process key group 2") == 1
    assert "output of ShortRecordForB, key 'b': a record has 1 fields but the output schema has 2" in message
