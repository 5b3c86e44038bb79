"""keyedstate.compiled: the C fast path is built by the install, and KEYEDSTATE_PURE_PYTHON turns it off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from keyedstate.compiled import PURE_PYTHON_VARIABLE, fastpath

_PROBE = """
from keyedstate.compiled import fastpath
from keyedstate import Types, ValueStateDescriptor
from keyedstate.state.heap import HeapKeyedStateBackend
from timers.facade import CoalescingTimerService
from timers import InternalTimerService
backend = HeapKeyedStateBackend(validate_writes=False)
state = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
calls = CoalescingTimerService(InternalTimerService(backend, None))
from keyedstate.spark.group_elements import rows_builder
compiled_rows = "rows_from_columns" in repr(rows_builder(["a"]))
print(fastpath is not None, type(state).__name__, "register_event_time_timer" in vars(calls), "flush" in vars(calls),
      compiled_rows)
"""


def _probe(value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_VARIABLE}
    if value is not None:
        env[PURE_PYTHON_VARIABLE] = value
    result = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_install_built_the_fast_path():
    if os.environ.get(PURE_PYTHON_VARIABLE):
        pytest.fail(f"{PURE_PYTHON_VARIABLE} is set for the test suite; unset it to test the compiled path")
    assert fastpath is not None, "keyedstate._fastpath is not built: reinstall with a C compiler (make venv)"


@pytest.mark.parametrize("value", [None, "0", "false"])
def test_the_fast_path_is_used_unless_turned_off(value):
    assert _probe(value) == "True CompiledHeapValueState True True True"


@pytest.mark.parametrize("value", ["1", "yes", "true"])
def test_keyedstate_pure_python_runs_the_python_implementation(value):
    assert _probe(value) == "False HeapValueState False False False"


@pytest.mark.parametrize("type_name, method", [("TimerFlush", "call"), ("TimerCall", "call"),
                                               ("HeapValueAccess", "value")])
def test_a_compiled_object_created_without_init_raises_instead_of_crashing(type_name, method):
    if fastpath is None:
        pytest.fail("keyedstate._fastpath is not built")
    cls = getattr(fastpath, type_name)
    bare = cls.__new__(cls)
    with pytest.raises(RuntimeError, match="without calling __init__"):
        getattr(bare, method)(*([1] if type_name == "TimerCall" else []))
