"""The heap backend's ValueState (reads and writes the store's dict itself, in C where the fast path is built)
behaves exactly like the store's own methods."""

from __future__ import annotations

import pickle
import random

import pytest

from keyedstate import StateTtlConfig, Time, Types, ValueStateDescriptor
from keyedstate.errors import NoKeyContextError, SerializationError, StateTypeMismatchError
from keyedstate.fastpath import fastpath
from keyedstate.state.base.layout import VOID_NAMESPACE, EntryCodec
from keyedstate.state.base.stores import ValueStore
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.state.primitives.value_state import CompiledValueState, TtlValueState, ValueState, value_state_class

IMPLEMENTATIONS = [ValueState, pytest.param(CompiledValueState, marks=pytest.mark.compiled_only)]


class _StoreValueState(ValueState):
    """The reference: value() and update() through the store's methods (the slow path the fast ones fall back to)."""

    __slots__ = ()

    def value(self):
        return self._store.get(self._namespace)

    def update(self, value):
        if value is None:
            self._store.delete(self._namespace)
        else:
            self._check(value)
            self._store.put(self._namespace, value)


def _built(cls, backend, name, type_info):
    """``cls`` over the store the backend registered for ``name``."""
    if cls is CompiledValueState and fastpath is None:
        pytest.fail("keyedstate._fastpath is not built: reinstall with a C compiler available (make venv)")
    descriptor = ValueStateDescriptor(name, type_info)
    backend.get_or_create_state(descriptor)
    registered = backend.registered_state(name)
    return cls(descriptor, registered.codec, registered.store, backend)


def test_plain_value_states_are_compiled_without_write_validation_where_built_and_ttl_ones_are_not():
    with_ttl = ValueStateDescriptor("ttl", Types.LONG())
    with_ttl.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(10)).build())
    for backend, compiled in ((HeapKeyedStateBackend(), False), (HeapKeyedStateBackend(validate_writes=False), True)):
        expected = CompiledValueState if compiled and fastpath is not None else ValueState
        assert type(backend.get_or_create_state(ValueStateDescriptor("plain", Types.LONG()))) is expected
        assert type(backend.get_or_create_state(with_ttl)) is TtlValueState


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("validate_writes", [True, False])
def test_random_operations_match_the_generic_value_state_on_the_same_store(cls, validate_writes):
    rng = random.Random(3)
    backend = HeapKeyedStateBackend(validate_writes=validate_writes)
    fast = _built(cls, backend, "count", Types.LONG())
    generic = _built(_StoreValueState, backend, "count", Types.LONG())
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


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda cls: cls.__name__)
def test_with_write_validation_an_unpicklable_value_fails_the_update_naming_the_state(cls):
    import threading

    backend = HeapKeyedStateBackend()
    state = _built(cls, backend, "holder", Types.PICKLED_BYTE_ARRAY())
    backend.set_current_key("k")
    state.update({"fine": [1]})
    with pytest.raises(SerializationError, match="'holder'.*lock"):
        state.update({"lock": threading.Lock()})
    assert state.value() == {"fine": [1]}


def test_without_write_validation_an_unpicklable_value_fails_the_export_naming_the_state():
    # The Spark group function skips the check at update() and pickles every value at the end of the call, in
    # bulk; a value that cannot be pickled must still be reported with the state's name.
    import pickle
    import threading

    backend = HeapKeyedStateBackend(validate_writes=False)
    state = backend.get_or_create_state(ValueStateDescriptor("holder", Types.PICKLED_BYTE_ARRAY()))
    backend.set_current_key("fine")
    state.update((1, 2))
    assert [pickle.loads(value) for _, records in backend.export_records() for _, value in records] == [(1, 2)]
    backend.set_current_key("broken")
    state.update({"lock": threading.Lock()})
    with pytest.raises(SerializationError, match="'holder'.*lock"):
        backend.export_records()


class _PickledStore(ValueStore):
    """A store keeping its entries pickled: the entry format is its encode/decode, which the ValueState follows."""

    encode, decode = staticmethod(pickle.dumps), staticmethod(pickle.loads)
    accepts, exact_types = None, frozenset()

    def __init__(self, backend):
        self.entries, self._backend = {}, backend

    def get(self, namespace):
        data = self.entries.get(self._backend.composite(namespace))
        return None if data is None else pickle.loads(data)

    def put(self, namespace, entry):
        self.entries[self._backend.composite(namespace)] = pickle.dumps(entry)

    def delete(self, namespace):
        self.entries.pop(self._backend.composite(namespace), None)


def test_the_value_state_follows_the_entry_format_its_store_defines():
    backend = HeapKeyedStateBackend()
    store = _PickledStore(backend)
    assert value_state_class(store) is ValueState  # the compiled twin covers entries stored as is only
    descriptor = ValueStateDescriptor("seen", Types.PICKLED_BYTE_ARRAY())
    state = ValueState(descriptor, EntryCodec(descriptor), store, backend)
    backend.set_current_key("k")
    seen = [1, 2]
    state.update(seen)
    assert list(store.entries.values()) == [pickle.dumps(seen)]
    assert state.value() == store.get(VOID_NAMESPACE) == seen and state.value() is not seen
    state.update(None)
    assert state.value() is None and store.entries == {}
    with pytest.raises(NoKeyContextError):
        backend.clear_current_key()
        state.value()
