"""keyedstate.fastpath: the C fast path is built by the install, and KEYEDSTATE_PURE_PYTHON turns it off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from keyedstate.fastpath import PURE_PYTHON_VARIABLE, fastpath

_PROBE = """
from keyedstate.fastpath import fastpath
from keyedstate import Types, ValueStateDescriptor
from keyedstate.state.heap import HeapKeyedStateBackend
from timers.user_service import TimerService
from timers import InternalTimerService
backend = HeapKeyedStateBackend(validate_writes=False)
state = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
calls = TimerService(InternalTimerService(backend, None))
from keyedstate.spark.group_elements import rows_builder
compiled_rows = "rows_from_columns" in repr(rows_builder(["a"]))
print(fastpath is not None, type(state).__name__, "register_event_time_timer" in vars(calls),
      "apply_collected_calls" in vars(calls), compiled_rows)
"""


def _probe(value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_VARIABLE}
    if value is not None:
        env[PURE_PYTHON_VARIABLE] = value
    result = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.compiled_only
def test_the_install_built_the_fast_path():
    if os.environ.get(PURE_PYTHON_VARIABLE):
        pytest.fail(f"{PURE_PYTHON_VARIABLE} is set for the test suite; unset it to test the compiled path")
    assert fastpath is not None, "keyedstate._fastpath is not built: reinstall with a C compiler (make venv)"


@pytest.mark.parametrize("value", [None, "0", "false"])
def test_the_fast_path_is_used_unless_turned_off(value):
    assert _probe(value) == "True CompiledValueState True True True"


@pytest.mark.parametrize("value", ["1", "yes", "true"])
def test_keyedstate_pure_python_runs_the_python_implementation(value):
    assert _probe(value) == "False ValueState False False False"


@pytest.mark.compiled_only
@pytest.mark.parametrize("type_name, method", [("TimerFlush", "call"), ("TimerCall", "call"),
                                               ("HeapValueAccess", "value")])
def test_a_compiled_object_created_without_init_raises_instead_of_crashing(type_name, method):
    if fastpath is None:
        pytest.fail("keyedstate._fastpath is not built")
    cls = getattr(fastpath, type_name)
    bare = cls.__new__(cls)
    with pytest.raises(RuntimeError, match="without calling __init__"):
        getattr(bare, method)(*([1] if type_name == "TimerCall" else []))


def test_every_attribute_the_compiled_types_read_is_declared_where_it_lives():
    """The C code names no attribute: the names come from the Python declarations. Each must be an attribute of the
    object the C code reads it from, so renaming a field without its declaration fails here (and at construction)."""
    from keyedstate.state.base.key_context import KEY_GROUP_FIELD, KEY_PREFIX_FIELD
    from keyedstate.state.heap import HeapKeyedStateBackend
    from timers import InternalTimerService
    from timers.user_service import _FLUSH_FIELDS

    backend = HeapKeyedStateBackend()
    service = InternalTimerService(backend, None)
    backend.set_current_key("k")
    service.register_event_time_timer(b"", 5)
    queue = service.event_queue
    group_queue = queue.queues[backend.key_group]
    owners = {"prefix_field": backend, "key_group_field": backend, "firing_field": queue, "queues_field": queue,
              "live_field": group_queue, "add_field": queue, "remove_field": queue}
    assert set(owners) == set(_FLUSH_FIELDS)
    for role, name in _FLUSH_FIELDS.items():
        assert hasattr(owners[role], name), f"{role}: {type(owners[role]).__name__} has no {name!r}"
    assert getattr(backend, KEY_PREFIX_FIELD) == backend.current_key_prefix
    assert getattr(backend, KEY_GROUP_FIELD) == backend.current_key_group


@pytest.mark.compiled_only
def test_a_compiled_type_refuses_an_object_without_the_declared_attribute():
    if fastpath is None:
        pytest.fail("keyedstate._fastpath is not built")

    class Renamed:  # a key context whose prefix field was renamed without its declaration
        current_prefix = None

    with pytest.raises(AttributeError, match="has no attribute 'key_prefix'"):
        fastpath.HeapValueAccess(entries={}, backend=Renamed(), prefix_field="key_prefix", namespace=b"",
                                 exact_types=None, slow_value=print, slow_update=print)


@pytest.mark.compiled_only
def test_a_compiled_timer_call_collects_while_collecting_and_otherwise_calls_the_service_method_itself():
    """Collecting: an int timestamp in range is stored; not collecting: it goes to ``direct(namespace, timestamp)``
    (the internal service's method, as the Python method does); anything else goes to the Python method."""
    if fastpath is None:
        pytest.fail("keyedstate._fastpath is not built")
    changes, direct, fallback = {}, [], []
    collecting = fastpath.CollectingFlag()
    timer_call = fastpath.TimerCall(collecting=collecting, changes=changes, mark=False,
                                    direct=lambda *args: direct.append(args), namespace=b"ns", fallback=fallback.append,
                                    max_timestamp=100)
    assert collecting.on is False
    collecting.on = True
    timer_call.call(5)
    collecting.on = False
    timer_call.call(6)
    timer_call.call(101)  # out of range: the Python method raises there
    timer_call.call(True)  # not exactly an int
    assert (changes, direct, fallback) == ({5: False}, [(b"ns", 6)], [101, True])
    with pytest.raises(TypeError, match="must be callable"):
        fastpath.TimerCall(collecting=collecting, changes={}, mark=True, direct=None, namespace=b"", fallback=print,
                           max_timestamp=1)
    with pytest.raises(TypeError, match="CollectingFlag"):  # a plain bool would be a copy, not the shared flag
        fastpath.TimerCall(collecting=True, changes={}, mark=True, direct=print, namespace=b"", fallback=print,
                           max_timestamp=1)


def test_the_timer_service_shares_one_collecting_flag_with_its_compiled_calls(implementation):
    from keyedstate.state.heap import HeapKeyedStateBackend
    from timers import InternalTimerService, TimerService

    service = TimerService(InternalTimerService(HeapKeyedStateBackend(), None))
    flag = service._compiled_flag
    assert all(call.collecting is flag for call in service._compiled_calls)
    for value in (True, False):
        service.collecting = value
        assert service.collecting is value
        assert flag is None or flag.on is value
    assert len(service._compiled_calls) == (4 if implementation == "compiled" else 0)
    assert (flag is None) == (implementation == "python")
