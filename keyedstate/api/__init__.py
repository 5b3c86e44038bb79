"""The user-facing function API (PyFlink's names)."""

from keyedstate.api.bootstrap_function import KeyedStateBootstrapFunction
from keyedstate.api.co_process_function import KeyedCoProcessFunction
from keyedstate.api.process_function import Function, KeyedProcessFunction
from keyedstate.api.runtime_context import RuntimeContext
from keyedstate.api.time_domain import MAX_WATERMARK, MIN_WATERMARK, OutputTag, TimeDomain

__all__ = ["Function", "KeyedProcessFunction", "KeyedCoProcessFunction", "KeyedStateBootstrapFunction",
           "RuntimeContext", "OutputTag", "TimeDomain", "MIN_WATERMARK", "MAX_WATERMARK"]
