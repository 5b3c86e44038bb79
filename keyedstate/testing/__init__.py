"""Tools for testing keyed functions without a cluster."""

from keyedstate.testing.clock import ManualClock
from keyedstate.testing.co_harness import KeyedCoProcessHarness
from keyedstate.testing.harness import HarnessSnapshot, KeyedProcessHarness

__all__ = ["ManualClock", "KeyedProcessHarness", "KeyedCoProcessHarness", "HarnessSnapshot"]
