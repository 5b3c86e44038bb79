"""Tools for testing keyed functions without a cluster."""

from keyedstate.testing.clock import ManualClock
from keyedstate.testing.co_harness import KeyedCoProcessHarness
from keyedstate.testing.harness import HarnessSettings, HarnessSnapshot, KeyedProcessHarness, RestoreSettings

__all__ = ["ManualClock", "KeyedProcessHarness", "KeyedCoProcessHarness", "HarnessSnapshot", "HarnessSettings",
           "RestoreSettings"]
