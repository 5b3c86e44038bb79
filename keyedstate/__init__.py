"""keyedstate: Apache Flink's keyed state, timers and checkpoint-driven Kafka commits for PySpark.

The user API uses PyFlink's names, so PyFlink ``KeyedProcessFunction`` code ports unchanged.
"""

from typing import TYPE_CHECKING

from keyedstate.errors import *  # noqa: F401,F403 - every error class is public
from keyedstate.errors import __all__ as _error_names
from keyedstate.lazy_exports import lazy_exports

# Public names load on first use: Spark starts several short-lived Python processes per query (data-source
# planning, the stream-reader process, workers), and a module that only needs an error class or one helper should
# not pay for numpy, msgpack, rocksdict and the state machinery at every start.
_LAZY_NAMES = {
    "Function": "keyedstate.api.process_function",
    "KeyedProcessFunction": "keyedstate.api.process_function",
    "KeyedCoProcessFunction": "keyedstate.api.co_process_function",
    "KeyedStateBootstrapFunction": "keyedstate.api.bootstrap_function",
    "RuntimeContext": "keyedstate.api.runtime_context",
    "MAX_WATERMARK": "keyedstate.api.time_domain",
    "MIN_WATERMARK": "keyedstate.api.time_domain",
    "OutputTag": "keyedstate.api.time_domain",
    "TimeDomain": "keyedstate.api.time_domain",
    "KeyGroupRange": "keyedstate.keygroups",
    **dict.fromkeys(
        ["AggregateFunction", "AggregatingState", "AggregatingStateDescriptor", "ListState", "ListStateDescriptor",
         "MapState", "MapStateDescriptor", "ReduceFunction", "ReducingState", "ReducingStateDescriptor", "State",
         "StateDescriptor", "StateTtlConfig", "Time", "ValueState", "ValueStateDescriptor"],
        "keyedstate.state",
    ),
    "HeapKeyedStateBackend": "keyedstate.state.heap",
    "RocksDBKeyedStateBackend": "keyedstate.state.rocksdb",
    "RocksDBOptions": "keyedstate.state.rocksdb",
    "TypeInformation": "keyedstate.typeinfo",
    "Types": "keyedstate.typeinfo",
    # PyFlink code imports Row next to Types; pyspark's Row has the same shape (positional or named fields,
    # attribute and index access).
    "Row": "pyspark.sql",
}

if TYPE_CHECKING:
    from pyspark.sql import Row

    from keyedstate.api.bootstrap_function import KeyedStateBootstrapFunction
    from keyedstate.api.co_process_function import KeyedCoProcessFunction
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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY_NAMES)


__all__ = [
    "AggregateFunction",
    "Function",
    "KeyedProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedStateBootstrapFunction",
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
