"""Run KeyedProcessFunctions on PySpark Structured Streaming (``applyInPandasWithState`` over key groups)."""

from keyedstate.spark.bootstrap import bootstrap_keyed_state
from keyedstate.spark.co_process import keyed_co_process
from keyedstate.spark.conf import apply_recommended_conf, recommended_spark_conf
from keyedstate.spark.inspection import inspect_keyed_state
from keyedstate.spark.inspection_plot import plot_inspection
from keyedstate.spark.inspection_report import (
    KeyedStateInspection,
    KeyGroupSummary,
    LargestKey,
    StateSummary,
    StorageSummary,
    TimerSummary,
)
from keyedstate.spark.metrics_listener import JsonLinesMetricsListener, PrometheusMetricsListener, keyed_state_metrics
from keyedstate.spark.options import KeyedProcessOptions
from keyedstate.spark.process import (
    EVENT_TIME_MS_COLUMN,
    KEY_GROUP_COLUMN,
    METRICS_SCHEMA_DDL,
    METRICS_TAG,
    add_key_group_column,
    apply_in_pandas_with_state_args,
    keyed_process,
    keyed_process_metrics_name,
    main_output,
    side_output,
)
from keyedstate.spark.savepoints import Savepoint, read_savepoint, stop_with_savepoint, write_savepoint
from keyedstate.spark.state_frame import read_keyed_state_frame
from keyedstate.spark.state_reader import read_keyed_state
from keyedstate.state.key_groups.initial_state import KeyedStateBootstrap
from keyedstate.state.rocksdb.versions import SnapshotPolicy

__all__ = [
    "EVENT_TIME_MS_COLUMN",
    "METRICS_SCHEMA_DDL",
    "METRICS_TAG",
    "KEY_GROUP_COLUMN",
    "add_key_group_column",
    "apply_in_pandas_with_state_args",
    "keyed_process",
    "KeyedProcessOptions",
    "keyed_process_metrics_name",
    "keyed_co_process",
    "bootstrap_keyed_state",
    "KeyedStateBootstrap",
    "main_output",
    "side_output",
    "apply_recommended_conf",
    "recommended_spark_conf",
    "read_keyed_state",
    "read_keyed_state_frame",
    "SnapshotPolicy",
    "Savepoint",
    "write_savepoint",
    "stop_with_savepoint",
    "read_savepoint",
    "inspect_keyed_state",
    "plot_inspection",
    "KeyedStateInspection",
    "KeyGroupSummary",
    "LargestKey",
    "StateSummary",
    "StorageSummary",
    "TimerSummary",
    "keyed_state_metrics",
    "PrometheusMetricsListener",
    "JsonLinesMetricsListener",
]
