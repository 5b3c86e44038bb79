"""The operator core that drives a KeyedProcessFunction or KeyedCoProcessFunction (shared by the harness and Spark)."""

from keyedstate.operator.keyed_process import KeyedProcessOperator
from keyedstate.operator.output_buffer import OutputBuffer

__all__ = ["KeyedProcessOperator", "OutputBuffer"]
