"""keyedstate: Apache Flink's keyed state, timers and checkpoint-driven Kafka commits for PySpark.

The user API uses PyFlink's names, so PyFlink ``KeyedProcessFunction`` code ports unchanged.
"""

from keyedstate.errors import *  # noqa: F401,F403 - every error class is public
from keyedstate.errors import __all__ as _error_names
from keyedstate.api.process_function import Function, KeyedProcessFunction
from keyedstate.api.runtime_context import RuntimeContext
from keyedstate.api.time_domain import MAX_WATERMARK, MIN_WATERMARK, OutputTag, TimeDomain
from keyedstate.keygroups import KeyGroupRange
from keyedstate.state import (
    AggregateFunction,
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReduceFunction,
    ReducingState,
    ReducingStateDescriptor,
    State,
    StateDescriptor,
    StateTtlConfig,
    Time,
    ValueState,
    ValueStateDescriptor,
)
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from keyedstate.typeinfo import TypeInformation, Types

__version__ = "0.1.0"


def __getattr__(name: str):
    # PyFlink code imports Row next to Types; pyspark's Row has the same shape (positional or named fields,
    # attribute and index access). Imported lazily so `import keyedstate` does not start loading PySpark.
    if name == "Row":
        from pyspark.sql import Row

        return Row
    raise AttributeError(f"module 'keyedstate' has no attribute {name!r}")


__all__ = [
    "AggregateFunction",
    "Function",
    "KeyedProcessFunction",
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "OutputTag",
    "RuntimeContext",
    "TimeDomain",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "HeapKeyedStateBackend",
    "RocksDBKeyedStateBackend",
    "RocksDBOptions",
    "KeyGroupRange",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "ReduceFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "Row",
    "State",
    "StateDescriptor",
    "StateTtlConfig",
    "Time",
    "TypeInformation",
    "Types",
    "ValueState",
    "ValueStateDescriptor",
    *_error_names,
]
