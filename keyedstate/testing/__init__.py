"""Tools for testing keyed functions without a cluster."""

from keyedstate.testing.clock import ManualClock

__all__ = ["ManualClock"]
