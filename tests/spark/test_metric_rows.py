"""The output frames of a key-group call when the metrics side output is the only side output (every keyed_process
with progress metrics): the main records keep their types, the metric rows come after them, and a record sent to an
undeclared side output is refused with the message of a stream without side outputs."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from keyedstate.errors import InvalidOutputError
from keyedstate.spark.metrics import METRICS_SCHEMA_DDL, METRICS_TAG, encode_metrics_row
from keyedstate.spark.output_frames import SIDE_OUTPUT_TAG_COLUMN, OutputLayout, side_output_column

MAIN = StructType([StructField("user", StringType()), StructField("n", LongType())])
METRICS = StructType([StructField(field.split()[0], IntegerType() if field.endswith(" INT") else LongType())
                      for field in METRICS_SCHEMA_DDL.split(", ")])
ROW = encode_metrics_row(tuple(range(len(METRICS.fields) - 1)) + (None,))


def test_a_call_yields_one_frame_its_main_records_then_its_metric_rows():
    layout = OutputLayout(MAIN, {METRICS_TAG: METRICS})
    frames = layout.to_frames([("a", 1), ("b", 2)], {METRICS_TAG: [(ROW, None)]}, "here")
    assert [len(frame) for frame in frames] == [3]
    (frame,) = frames
    assert frame["n"].dtype == "int64"  # the metrics row's placeholder leaves the main column's dtype alone
    assert frame[SIDE_OUTPUT_TAG_COLUMN].tolist() == [None, None, METRICS_TAG]
    assert frame[side_output_column(METRICS_TAG)].tolist() == [None, None, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,"]
    assert layout.output_schema[side_output_column(METRICS_TAG)].dataType == StringType()  # not a struct: cheap
    assert frame[["user", "n"]][frame[SIDE_OUTPUT_TAG_COLUMN].isna()].values.tolist() == [["a", 1], ["b", 2]]
    # a call without records has only its metrics row; one without anything, no frame
    assert [len(frame) for frame in layout.to_frames([], {METRICS_TAG: [(ROW, None)]}, "here")] == [1]
    assert layout.to_frames([], {}, "here") == []


@pytest.mark.parametrize(("values", "column_type"), [
    ([1, 2], LongType()), ([1.5, None], DoubleType()), ([True, False], BooleanType()), ([True, None], BooleanType()),
    ([dt.datetime(2026, 1, 1), None], TimestampType()),
    ([dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)], TimestampType()),
    ([dt.timedelta(seconds=1)], DayTimeIntervalType()), (["a", None], StringType()),
    ([Decimal("1.5")], DecimalType(10, 1)), ([np.int32(3)], IntegerType()), ([None, 4], LongType()),
    ([b"x"], BinaryType()),
], ids=lambda case: repr(case) if isinstance(case, list) else case.simpleString())
def test_the_metric_rows_leave_each_main_column_with_the_dtype_of_its_records(values, column_type):
    """Whatever values a call's main records hold, the main column of its one frame has the dtype pandas gives those
    values alone: the metrics rows' placeholders never turn ints into floats or times into objects."""
    layout = OutputLayout(StructType([StructField("v", column_type)]), {METRICS_TAG: METRICS})
    (frame,) = layout.to_frames([(v,) for v in values], {METRICS_TAG: [(ROW, None), (ROW, None)]}, "here")
    assert frame["v"].dtype == pd.DataFrame({"v": values})["v"].dtype
    assert frame[SIDE_OUTPUT_TAG_COLUMN].tolist() == [None] * len(values) + [METRICS_TAG] * 2


def test_an_undeclared_side_output_is_named_as_without_metrics():
    layout = OutputLayout(MAIN, {METRICS_TAG: METRICS})
    with pytest.raises(InvalidOutputError, match="sent records to side output.s. late, but keyed_process was not "
                                                 "given side_outputs"):
        layout.to_frames([("a", 1)], {"late": [(("a", 1), None)], METRICS_TAG: [(ROW, None)]}, "here")
    declared = OutputLayout(MAIN, {"alerts": MAIN, METRICS_TAG: METRICS})
    with pytest.raises(InvalidOutputError, match="side output 'late' is not declared; declared: alerts$"):
        declared.to_frames([("a", 1)], {"late": [(("a", 1), None)]}, "here")


def test_keyed_state_metrics_reads_every_form_of_a_progress():
    """A classic session's Row, a progress's JSON, and Spark Connect's values-and-schema Row give the same dict."""
    import json

    from pyspark.sql import Row

    from keyedstate.spark import keyed_state_metrics

    values = {"numRecordsIn": 3, "currentWatermark": None}
    schema = {"type": "struct", "fields": [{"name": name, "type": "long", "nullable": True, "metadata": {}}
                                           for name in values]}
    forms = [
        {"observedMetrics": {"keyedstate.Count": Row(**values), "other": Row(x=1)}},
        json.dumps({"observedMetrics": {"keyedstate.Count": values}}),
        {"observedMetrics": {"keyedstate.Count": Row(values=list(values.values()), schema=Row(**{
            "type": "struct", "fields": [Row(**field) for field in schema["fields"]]}))}},
    ]
    assert [keyed_state_metrics(form) for form in forms] == [{"Count": values}] * 3
    assert keyed_state_metrics({"observedMetrics": None}) == {}


@pytest.mark.spark
def test_an_encoded_metrics_row_reads_back_as_the_metrics_struct_under_ansi_mode(spark):
    from keyedstate.spark.metrics import METRICS_FIELDS, NULLABLE_METRICS_FIELDS, metrics_struct

    # the nullable fields travel as empty parts
    values = tuple(None if name in NULLABLE_METRICS_FIELDS else index for index, (name, _) in enumerate(METRICS_FIELDS))
    previous = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")  # a plain cast of "" would fail the batch here
    try:
        frame = spark.createDataFrame([(encode_metrics_row(values),), (None,)], "m STRING")
        read = frame.select(metrics_struct("m").alias("m"))
        rows = read.collect()
    finally:
        spark.conf.set("spark.sql.ansi.enabled", previous)
    assert tuple(rows[0].m) == values and rows[1].m is None
    assert [(f.name, f.dataType.simpleString()) for f in read.schema["m"].dataType.fields] == \
        [(name, type_.lower()) for name, type_ in METRICS_FIELDS]
