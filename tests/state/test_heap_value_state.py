"""The heap backend's ValueState (reads and writes the store's dict itself, in C where the fast path is built)
behaves exactly like the generic one."""

from __future__ import annotations

import random

import pytest

from keyedstate import StateTtlConfig, Time, Types, ValueStateDescriptor
from keyedstate.fastpath import fastpath
from keyedstate.errors import NoKeyContextError, StateTypeMismatchError
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.state.heap.primitives import CompiledHeapValueState, HeapValueState
from keyedstate.state.primitives import ValueState, create_primitive

IMPLEMENTATIONS = [HeapValueState, pytest.param(CompiledHeapValueState, marks=pytest.mark.compiled_only)]


def _generic(backend, name, type_info):
    """The generic ValueState over the same kind of store, as the other backends build it."""
    descriptor = ValueStateDescriptor(name, type_info)
    backend.get_or_create_state(descriptor)
    registered = backend.registered_state(name)
    return create_primitive(descriptor, registered.codec, registered.store, backend)


def _built(cls, backend, name, type_info):
    """``cls`` over the store the backend registered for ``name``."""
    if cls is CompiledHeapValueState and fastpath is None:
        pytest.fail("keyedstate._fastpath is not built: reinstall with a C compiler available (make venv)")
    descriptor = ValueStateDescriptor(name, type_info)
    backend.get_or_create_state(descriptor)
    registered = backend.registered_state(name)
    return cls(descriptor, registered.codec, registered.store, backend)


def test_plain_value_states_are_heap_value_states_compiled_without_write_validation_and_ttl_ones_are_not():
    validating = HeapKeyedStateBackend()
    assert type(validating.get_or_create_state(ValueStateDescriptor("plain", Types.LONG()))) is HeapValueState
    spark_like = HeapKeyedStateBackend(validate_writes=False)
    expected = HeapValueState if fastpath is None else CompiledHeapValueState
    assert type(spark_like.get_or_create_state(ValueStateDescriptor("plain", Types.LONG()))) is expected
    with_ttl = ValueStateDescriptor("ttl", Types.LONG())
    with_ttl.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(10)).build())
    for backend in (validating, spark_like):
        state = backend.get_or_create_state(with_ttl)
        assert isinstance(state, ValueState) and not isinstance(state, HeapValueState)


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("validate_writes", [True, False])
def test_random_operations_match_the_generic_value_state_on_the_same_store(cls, validate_writes):
    rng = random.Random(3)
    backend = HeapKeyedStateBackend(validate_writes=validate_writes)
    fast = _built(cls, backend, "count", Types.LONG())
    generic = _generic(backend, "count", Types.LONG())
    for _ in range(3_000):
        # a fresh prefix object for a key seen before must find that key's value
        backend.set_current_key(f"k{rng.randrange(20)}")
        namespace = rng.choice([None, None, "window-1", ("window", 2)])
        fast.set_current_namespace(namespace)
        generic.set_current_namespace(namespace)
        writer, reader = rng.sample([fast, generic], 2)
        operation = rng.random()
        if operation < 0.45:
            writer.update(rng.randrange(1_000))
        elif operation < 0.55:
            writer.update(None)
        elif operation < 0.6:
            writer.clear()
        assert fast.value() == generic.value() == reader.value()


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda cls: cls.__name__)
def test_any_value_is_stored_as_is_when_the_type_accepts_anything(cls):
    backend = HeapKeyedStateBackend(validate_writes=False)
    state = _built(cls, backend, "anything", Types.PICKLED_BYTE_ARRAY())
    backend.set_current_key("k")
    value = {"count": 1, "seen": [1, 2]}
    state.update(value)
    assert state.value() is value
    state.update(None)
    assert state.value() is None
    assert backend.count_keys_with_state() == 0


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda cls: cls.__name__)
def test_errors_are_the_generic_ones(cls):
    backend = HeapKeyedStateBackend(validate_writes=False)
    state = _built(cls, backend, "count", Types.LONG())
    with pytest.raises(NoKeyContextError):
        state.value()
    with pytest.raises(NoKeyContextError):
        state.update(1)
    backend.set_current_key("k")
    with pytest.raises(StateTypeMismatchError):
        state.update("not a long")
    assert state.value() is None
    state.update(7)
    backend.clear_current_key()
    with pytest.raises(NoKeyContextError):  # the remembered stored key is not used without a current key
        state.value()
    backend.set_current_key("k")
    assert state.value() == 7


def test_without_write_validation_an_unpicklable_value_fails_the_export_naming_the_state():
    # The Spark group function skips the check at update() and pickles every value at the end of the call, in
    # bulk; a value that cannot be pickled must still be reported with the state's name.
    import pickle
    import threading

    from keyedstate.errors import SerializationError

    backend = HeapKeyedStateBackend(validate_writes=False)
    state = backend.get_or_create_state(ValueStateDescriptor("holder", Types.PICKLED_BYTE_ARRAY()))
    backend.set_current_key("fine")
    state.update((1, 2))
    assert [pickle.loads(value) for _, records in backend.export_records() for _, value in records] == [(1, 2)]
    backend.set_current_key("broken")
    state.update({"lock": threading.Lock()})
    with pytest.raises(SerializationError, match="'holder'.*lock"):
        backend.export_records()
