"""The heap backend's ValueState (reads and writes the store's dict itself) behaves exactly like the generic one."""

from __future__ import annotations

import random

import pytest

from keyedstate import StateTtlConfig, Time, Types, ValueStateDescriptor
from keyedstate.errors import NoKeyContextError, StateTypeMismatchError
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.state.heap.primitives import HeapValueState
from keyedstate.state.primitives import ValueState, create_primitive


def _generic(backend, name, type_info):
    """The generic ValueState over the same kind of store, as the other backends build it."""
    descriptor = ValueStateDescriptor(name, type_info)
    backend.get_or_create_state(descriptor)
    registered = backend.registered_state(name)
    return create_primitive(descriptor, registered.codec, registered.store, backend)


def test_plain_value_states_are_heap_value_states_and_ttl_ones_are_not():
    backend = HeapKeyedStateBackend()
    assert type(backend.get_or_create_state(ValueStateDescriptor("plain", Types.LONG()))) is HeapValueState
    with_ttl = ValueStateDescriptor("ttl", Types.LONG())
    with_ttl.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(10)).build())
    state = backend.get_or_create_state(with_ttl)
    assert isinstance(state, ValueState) and not isinstance(state, HeapValueState)


@pytest.mark.parametrize("validate_writes", [True, False])
def test_random_operations_match_the_generic_value_state_on_the_same_store(validate_writes):
    rng = random.Random(3)
    backend = HeapKeyedStateBackend(validate_writes=validate_writes)
    fast = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    generic = _generic(backend, "count", Types.LONG())
    assert type(fast) is HeapValueState and type(generic) is ValueState
    for _ in range(2_000):
        backend.set_current_key(f"k{rng.randrange(20)}")
        writer, reader = rng.sample([fast, generic], 2)
        operation = rng.random()
        if operation < 0.45:
            writer.update(rng.randrange(1_000))
        elif operation < 0.55:
            writer.update(None)
        elif operation < 0.6:
            writer.clear()
        assert fast.value() == generic.value() == reader.value()


def test_errors_are_the_generic_ones():
    backend = HeapKeyedStateBackend()
    state = backend.get_or_create_state(ValueStateDescriptor("count", Types.LONG()))
    with pytest.raises(NoKeyContextError):
        state.value()
    with pytest.raises(NoKeyContextError):
        state.update(1)
    backend.set_current_key("k")
    with pytest.raises(StateTypeMismatchError):
        state.update("not a long")
    assert state.value() is None
