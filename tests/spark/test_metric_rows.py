"""The output frames of a key-group call when the metrics side output is the only side output (every keyed_process
with progress metrics): the main records keep their types, the metric rows come after them, and a record sent to an
undeclared side output is refused with the message of a stream without side outputs."""

from __future__ import annotations

import pandas as pd
import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from keyedstate.errors import InvalidOutputError
from keyedstate.spark.metrics import METRICS_SCHEMA_DDL, METRICS_TAG, encode_metrics_row
from keyedstate.spark.output_frames import SIDE_OUTPUT_TAG_COLUMN, OutputLayout, side_output_column

MAIN = StructType([StructField("user", StringType()), StructField("n", LongType())])
METRICS = StructType([StructField(field.split()[0], IntegerType() if field.endswith(" INT") else LongType())
                      for field in METRICS_SCHEMA_DDL.split(", ")])
ROW = encode_metrics_row(tuple(range(len(METRICS.fields) - 1)) + (None,))


def test_main_records_keep_their_dtypes_and_the_metric_rows_follow():
    layout = OutputLayout(MAIN, {METRICS_TAG: METRICS})
    frames = layout.to_frames([("a", 1), ("b", 2)], {METRICS_TAG: [(ROW, None)]}, "here")
    assert [len(frame) for frame in frames] == [2, 1]
    main, rows = frames
    assert main["n"].dtype == rows["n"].dtype == "int64"  # PySpark concatenates them: no object column
    assert main[SIDE_OUTPUT_TAG_COLUMN].isna().all() and main[side_output_column(METRICS_TAG)].isna().all()
    assert rows[SIDE_OUTPUT_TAG_COLUMN].tolist() == [METRICS_TAG]
    assert rows[side_output_column(METRICS_TAG)][0] == "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,"
    assert layout.output_schema[side_output_column(METRICS_TAG)].dataType == StringType()  # not a struct: cheap
    merged = pd.concat(frames, ignore_index=True)
    assert merged[["user", "n"]][merged[SIDE_OUTPUT_TAG_COLUMN].isna()].values.tolist() == [["a", 1], ["b", 2]]
    # a call without records has only its metrics row; one without anything, no frame
    assert [len(frame) for frame in layout.to_frames([], {METRICS_TAG: [(ROW, None)]}, "here")] == [1]
    assert layout.to_frames([], {}, "here") == []


def test_the_metric_rows_placeholders_keep_every_main_dtype():
    """Whatever dtypes a call's main records have, the metric rows' placeholders have the same, so PySpark's
    concatenation of the call's frames keeps each column's dtype."""
    from keyedstate.spark.output_frames import _placeholders

    main = pd.DataFrame({
        "n": pd.Series([1], dtype="int32"), "x": [1.5], "ok": [True], "at": [pd.Timestamp("2026-01-01")],
        "at_utc": [pd.Timestamp("2026-01-01", tz="UTC")], "took": [pd.Timedelta(seconds=1)], "name": ["a"],
        "label": pd.Series(["b"], dtype="string"), "maybe": pd.Series([2], dtype="Int64"),
    })
    for name in main.columns:
        placeholders = _placeholders(main[name], 2)
        assert len(placeholders) == 2
        assert pd.concat([main[name], pd.Series(placeholders)], ignore_index=True).dtype == main[name].dtype, name
    assert main["name"].dtype == object and list(_placeholders(main["name"], 2)) == [None, None]


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
